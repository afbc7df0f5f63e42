//! `husk kubelet`: a thin kubelet that drives any CRI runtime (husk serve,
//! containerd) through the whole pod flow, from Pod manifests.
//!
//! ```text
//! sources (dir, URL, …) ─snapshots─▶ PodConfig ─ADD/UPDATE/DELETE─▶ pod manager
//!                                                                     │
//! PLEG relist/events ─┐                                               ▼
//! probe results ──────┼──────────────▶ sync loop ──dispatch──▶ pod workers (one per pod)
//! resync timers ──────┘                   ▲                    syncPod · probes · status
//!                                         └────── done (retry after) ──┘
//! ```
//!
//! The loop never blocks on the runtime: CRI calls happen in the workers,
//! PLEG and the prober. Housekeeping (every 2 s) writes the node's health
//! and, once every source has reported, collects garbage.
//!
//! The rooms, each using only those listed before it:
//!
//! - `kit`: settings, the CRI client, quantities, Pod defaults, labels,
//!   back-off, the event recorder, a pod's progress;
//! - `spec`: sandbox and container config, volumes, env, pull secrets;
//! - `pods`: sources, pod config, the pod manager, admission, deletions;
//! - `managers`: probes and hooks, PLEG, status, images, cgroups;
//! - `lifecycle`: pod workers, sync, start, terminate, GC, and `Ctx`;
//! - `node`: the API server's client and the kubelet API.
//!
//! This file is the sync loop that ties them together.

pub mod kit;
pub mod lifecycle;
pub mod managers;
pub mod node;
pub mod pods;
pub mod spec;

use kit::backoff::Backoff;
use kit::node_config::{self, Capacity};
use kit::{defaults, recorder, runtime::Cri, settings::Settings};
use lifecycle::pod_workers::{PodWorkers, Work};
use lifecycle::{gc, terminate, Ctx};
use managers::certificates;
use managers::cgroups::PodCgroups;
use managers::eviction::EvictionManager;
use managers::image_gc::ImageGc;
use managers::images::ImageManager;
use managers::pleg;
use managers::prober::ProbeManager;
use managers::reasons::ReasonCache;
use managers::status_manager::{StatusEvent, StatusManager};
use node::{api as node_api, apiserver};
use pods::sources::{self, ManifestError, Op, PodConfig, SourceSnapshot};
use pods::{deletions, pod_manager};
use spec::api_volumes;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

/// What the kubelet tells its display.
#[derive(Debug, Clone)]
pub enum Notice {
    Status(StatusEvent),
    ManifestError(ManifestError),
    /// Connected: runtime name and version.
    Runtime(String, String),
}

/// How a caller drives a running kubelet besides the configured sources.
pub struct Control {
    /// Snapshots from sources of the caller's own (`husk run`, an API server).
    pub snapshots: mpsc::Receiver<SourceSnapshot>,
    /// Those sources' names: GC waits until each has sent a snapshot.
    pub sources: Vec<String>,
    /// Becomes true to stop the loop (pods keep running in the runtime).
    pub stop: watch::Receiver<bool>,
}

/// Runs the kubelet until `control.stop` turns true.
pub async fn run(
    mut settings: Settings,
    notices: mpsc::UnboundedSender<Notice>,
    mut control: Control,
) -> anyhow::Result<()> {
    // The cgroup driver first: one this node cannot have refuses the start.
    let cgroups = PodCgroups::new(&settings).map_err(|e| anyhow::anyhow!(e))?;
    let cri = Cri::connect(&settings.runtime_endpoint).await?;
    let mut rotation = None;
    let cluster = match &settings.kubeconfig {
        Some(k) => {
            // TLS bootstrap first: nothing joins without a credential.
            if let Some(b) = &settings.bootstrap_kubeconfig {
                certificates::bootstrap(
                    k,
                    b,
                    &settings.cert_dir,
                    &settings.node_name,
                    certificates::BOOTSTRAP_TIMEOUT,
                )
                .await
                .map_err(anyhow::Error::msg)?;
            }
            let (client, url, identity) =
                apiserver::connect(k, settings.rotate_certificates).await?;
            if settings.node_ip.is_none() {
                settings.node_ip = apiserver::local_ip_towards(&url);
            }
            tracing::info!(server = %url, node_ip = ?settings.node_ip, "joining the cluster");
            if let Some(id) = identity {
                rotation = Some(tokio::spawn(certificates::rotate(
                    client.clone(),
                    id,
                    settings.cert_dir.clone(),
                    settings.node_name.clone(),
                    certificates::csr::Kind::Client,
                    false,
                )));
            }
            Some(client)
        }
        None => None,
    };
    // The node's cgroups before any pod: reservations beyond capacity or
    // a cgroup that cannot be made refuse the start, as the kubelet's
    // container manager does.
    let capacity = Capacity::read(&settings.root);
    let reserved = settings.kube_reserved.plus(&settings.system_reserved);
    node_config::check_reserved(&capacity, &reserved).map_err(|e| anyhow::anyhow!(e))?;
    cgroups
        .ensure_node(&settings, &capacity)
        .map_err(|e| anyhow::anyhow!("node cgroups: {e}"))?;
    let _ = notices.send(Notice::Runtime(cri.name.clone(), cri.version.clone()));
    tracing::info!(runtime = %cri.name, version = %cri.version, node = %settings.node_name, "kubelet connected to the runtime");
    std::fs::create_dir_all(&settings.root)
        .map_err(|e| anyhow::anyhow!("create {}: {e}", settings.root.display()))?;
    let (status_tx, mut status_rx) = mpsc::unbounded_channel();
    let (probe_tx, mut probe_rx) = mpsc::unbounded_channel::<String>();
    let (pleg_tx, mut pleg_rx) = mpsc::unbounded_channel();
    let (done_tx, mut done_rx) = mpsc::unbounded_channel();
    let (snap_tx, mut snap_rx) = mpsc::channel::<SourceSnapshot>(16);
    let health = Arc::new(pleg::Health::default());
    let (api_status_tx, api_status_rx) = mpsc::unbounded_channel();
    let (event_tx, event_rx) = mpsc::unbounded_channel();
    let recorder = match cluster {
        Some(_) => recorder::Recorder::new(event_tx),
        None => recorder::Recorder::default(),
    };
    let image_gc = Arc::new(ImageGc::new(
        cri.clone(),
        settings.image_gc.clone(),
        recorder.clone(),
        &settings.node_name,
    ));
    let eviction = Arc::new(EvictionManager::new(
        cri.clone(),
        settings.eviction.clone(),
        settings.root.clone(),
        image_gc.clone(),
        recorder.clone(),
        &settings.node_name,
    ));
    let ctx = Arc::new(Ctx {
        cri: cri.clone(),
        images: ImageManager::new(
            cri.clone(),
            recorder.clone(),
            settings.image_backoff_initial,
            settings.image_backoff_max,
        ),
        crash_backoff: Backoff::new(settings.crash_backoff_initial, settings.crash_backoff_max),
        mount_backoff: Backoff::new(
            Duration::from_millis(500),
            settings.error_requeue.max(Duration::from_millis(500)),
        ),
        reasons: ReasonCache::default(),
        probes: ProbeManager::new(cri.clone(), probe_tx, recorder.clone()),
        status: StatusManager::new(
            settings.status_dir.clone(),
            status_tx,
            cluster.as_ref().map(|_| api_status_tx.clone()),
        ),
        pleg: health.clone(),
        cgroups,
        image_gc,
        eviction,
        recorder,
        objects: api_volumes::Objects::new(cluster.clone()),
        settings: settings.clone(),
    });
    let mut tasks: Vec<tokio::task::JoinHandle<()>> = rotation.into_iter().collect();
    let mut expected: Vec<String> = control.sources.clone();
    if let Some(client) = cluster {
        let (api, serving) = node_api::start(ctx.clone()).await?;
        tasks.push(api);
        if let Some((identity, issued)) = serving {
            let mut sans = vec![settings.node_name.clone()];
            sans.extend(settings.node_ip.clone());
            tasks.push(tokio::spawn(certificates::rotate(
                client.clone(),
                identity,
                settings.cert_dir.clone(),
                settings.node_name.clone(),
                certificates::csr::Kind::Serving(sans),
                !issued,
            )));
        }
        expected.push(apiserver::pods::SOURCE.into());
        tasks.extend(apiserver::start(
            client,
            &settings,
            cri.clone(),
            node_api_managers(&ctx),
            snap_tx.clone(),
            api_status_rx,
            event_rx,
        ));
    }
    let api_status = api_status_tx;
    let mut sources_ready = false;
    let mut deletions = deletions::Deletions::default();
    if let Some(p) = &settings.manifests {
        expected.push("file".into());
        tasks.push(tokio::spawn(sources::watch_dir(
            p.clone(),
            settings.node_name.clone(),
            settings.file_check_frequency,
            snap_tx.clone(),
        )));
    }
    if let Some(u) = &settings.manifest_url {
        expected.push("http".into());
        tasks.push(tokio::spawn(sources::poll_url(
            u.clone(),
            settings.node_name.clone(),
            settings.http_check_frequency,
            snap_tx.clone(),
        )));
    }
    tasks.push(tokio::spawn(managers::oom::watch(
        ctx.recorder.clone(),
        settings.node_name.clone(),
    )));
    tasks.push(tokio::spawn(pleg::run(
        cri.clone(),
        settings.node_name.clone(),
        settings.relist_period,
        pleg_tx,
        health.clone(),
    )));
    // Sources, PLEG and (in a cluster) the node's API and API server
    // loops are running: a Type=notify unit is started.
    crate::sdnotify::ready();
    let mut config = PodConfig::default();
    let mut pods = pod_manager::PodManager::default();
    let mut workers = PodWorkers::new(ctx.clone(), done_tx);
    let mut due: HashMap<String, Instant> = HashMap::new();
    let mut housekeeping = tokio::time::interval(HOUSEKEEPING);
    // The longest a housekeeping tick has waited past its time.
    let mut housekeeping_late = Duration::ZERO;
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let mut gc_running: Option<tokio::task::JoinHandle<()>> = None;
    let mut eviction_tick = tokio::time::interval(ctx.eviction.period());
    let mut eviction_running: Option<tokio::task::JoinHandle<()>> = None;
    let (evict_tx, mut evict_rx) = mpsc::unbounded_channel::<String>();
    let mut image_gc_tick = tokio::time::interval(ctx.image_gc.period());
    image_gc_tick.tick().await;
    let mut image_gc_running: Option<tokio::task::JoinHandle<()>> = None;
    let sync = |workers: &mut PodWorkers, pods: &pod_manager::PodManager, uid: &str| {
        if let Some(d) = pods.get(uid) {
            workers.dispatch(uid, Work::Sync(d.pod.clone(), d.rejection.clone()));
        }
    };
    loop {
        tokio::select! {
            _ = control.stop.changed() => {
                if *control.stop.borrow() {
                    break;
                }
            }
            Some(snap) = snap_rx.recv() => {
                let (updates, errors) = config.merge(snap);
                for e in errors {
                    tracing::warn!(origin = %e.origin, message = %e.message, "manifest rejected");
                    let _ = notices.send(Notice::ManifestError(e));
                }
                for u in updates {
                    let uid = defaults::uid(&u.pod).to_string();
                    // A graceful deletion in the API server: terminate
                    // with its grace period; the API object goes when done.
                    let deleting = u.pod.metadata.deletion_timestamp.is_some() && u.source == apiserver::pods::SOURCE;
                    if deleting && u.op != Op::Delete {
                        pods.remove(&uid);
                        let grace = defaults::grace_period(&u.pod);
                        match deletions.update(&uid, grace) {
                            deletions::Action::Start => {
                                tracing::info!(pod = %defaults::full_name(&u.pod), pod_uid = %uid, grace, "pod is being deleted");
                                due.remove(&uid);
                                workers.dispatch(&uid, Work::Terminate(u.pod.clone()));
                            }
                            deletions::Action::Shorten(g) => {
                                tracing::info!(pod = %defaults::full_name(&u.pod), pod_uid = %uid, grace = g, "deletion grace period shortened");
                                tokio::spawn(terminate::shorten(ctx.clone(), uid.clone(), g));
                            }
                            deletions::Action::Nothing => {}
                        }
                        continue;
                    }
                    match u.op {
                        Op::Add | Op::Update => {
                            tracing::info!(pod = %defaults::full_name(&u.pod), pod_uid = %uid, op = ?u.op, source = %u.source, "pod update");
                            let new = pods.get(&uid).is_none() && ctx.status.get(&uid).is_none();
                            pods.upsert(&uid, u.pod.clone(), &u.source);
                            // A pod new to this node is admitted by eviction
                            // too (refused under pressure), and by the node's
                            // pod capacity (maxPods).
                            if new && u.op == Op::Add {
                                if let Err(r) = ctx.eviction.admit(&u.pod).and_then(|()| pods.fits(&uid, ctx.settings.max_pods, |id| finished(&ctx, id))) {
                                    pods.reject(&uid, r);
                                }
                            }
                            sync(&mut workers, &pods, &uid);
                        }
                        Op::Reconcile => pods.reconcile(&uid, u.pod.clone()),
                        Op::Delete => {
                            // A pod already terminated (or terminating) for its deletion is done.
                            let known = pods.remove(&uid).is_some();
                            if !known && deleting {
                                if workers.is_terminating(&uid) {
                                    if let deletions::Action::Shorten(g) = deletions.update(&uid, defaults::grace_period(&u.pod)) {
                                        tokio::spawn(terminate::shorten(ctx.clone(), uid.clone(), g));
                                    }
                                }
                                deletions.forget(&uid);
                                continue;
                            }
                            deletions.forget(&uid);
                            tracing::info!(pod = %defaults::full_name(&u.pod), pod_uid = %uid, source = %u.source, "pod deleted");
                            due.remove(&uid);
                            workers.dispatch(&uid, Work::Terminate(u.pod.clone()));
                        }
                    }
                }
            }
            Some(snap) = control.snapshots.recv() => {
                let _ = snap_tx.send(snap).await;
            }
            Some(ev) = pleg_rx.recv() => {
                sync(&mut workers, &pods, &ev.uid);
            }
            Some(uid) = probe_rx.recv() => {
                sync(&mut workers, &pods, &uid);
            }
            Some(d) = done_rx.recv() => {
                if d.terminated {
                    deletions.finished(&d.uid);
                    for (uid, w) in workers.terminated(&d.uid) {
                        workers.dispatch(&uid, w);
                    }
                } else if pods.get(&d.uid).is_some() {
                    let after = d.retry_after.unwrap_or(settings.sync_frequency);
                    due.insert(d.uid, Instant::now() + after);
                }
            }
            Some(uid) = evict_rx.recv() => {
                sync(&mut workers, &pods, &uid);
            }
            _ = eviction_tick.tick() => {
                if eviction_running.as_ref().is_none_or(|h| h.is_finished()) {
                    let active = active_pods(&ctx, &pods);
                    let (ctx, tx) = (ctx.clone(), evict_tx.clone());
                    eviction_running = Some(tokio::spawn(async move {
                        if let Some(p) = ctx.eviction.synchronize(active).await {
                            let _ = tx.send(defaults::uid(&p).to_string());
                        }
                    }));
                }
            }
            _ = image_gc_tick.tick() => {
                if image_gc_running.as_ref().is_none_or(|h| h.is_finished()) {
                    let ctx = ctx.clone();
                    image_gc_running = Some(tokio::spawn(async move {
                        if let Err(e) = ctx.image_gc.collect().await {
                            tracing::warn!(error = %e, "image garbage collection failed");
                        }
                    }));
                }
            }
            Some(st) = status_rx.recv() => {
                let _ = notices.send(Notice::Status(st));
            }
            _ = tick.tick() => {
                let now = Instant::now();
                let ready: Vec<String> = due.iter().filter(|(_, t)| **t <= now).map(|(u, _)| u.clone()).collect();
                for uid in ready {
                    due.remove(&uid);
                    sync(&mut workers, &pods, &uid);
                }
            }
            at = housekeeping.tick() => {
                housekeeping_late = housekeeping_late.max(at.elapsed());
                write_node_status(&ctx, pods.len(), housekeeping_late);
                if !sources_ready && config.seen_all(&expected) {
                    sources_ready = true;
                    let _ = api_status.send(apiserver::status_sync::Msg::SourcesReady);
                }
                let idle = gc_running.as_ref().is_none_or(|h| h.is_finished());
                if config.seen_all(&expected) {
                    ctx.status.prune_files();
                }
                if idle && config.seen_all(&expected) && health.since_last_relist().is_some() {
                    let known: HashSet<String> = pods.uids().chain(workers.uids()).cloned().collect();
                    let relist = health.latest();
                    let ctx = ctx.clone();
                    gc_running = Some(tokio::spawn(async move { gc::collect(&ctx, &known, &relist).await }));
                }
            }
        }
    }
    for t in tasks {
        t.abort();
    }
    for h in [gc_running, eviction_running, image_gc_running]
        .into_iter()
        .flatten()
    {
        h.abort();
    }
    // Status changes queued before the stop still reach the display.
    while let Ok(st) = status_rx.try_recv() {
        let _ = notices.send(Notice::Status(st));
    }
    Ok(())
}

/// Whether the pod `uid` has reached a terminal phase (Succeeded or
/// Failed): it holds no place on the node and eviction cannot choose it.
fn finished(ctx: &Ctx, uid: &str) -> bool {
    ctx.status
        .get(uid)
        .is_some_and(|s| matches!(s.phase.as_deref(), Some("Succeeded" | "Failed")))
}

/// Pods eviction may choose from: admitted, not finished, not evicted.
fn active_pods(
    ctx: &Ctx,
    pods: &pod_manager::PodManager,
) -> Vec<Arc<k8s_openapi::api::core::v1::Pod>> {
    pods.uids()
        .filter_map(|u| pods.get(u))
        .filter(|d| d.rejection.is_none())
        .filter(|d| {
            let uid = defaults::uid(&d.pod);
            !finished(ctx, uid) && ctx.eviction.evicted(uid).is_none()
        })
        .map(|d| d.pod.clone())
        .collect()
}

fn node_api_managers(ctx: &Ctx) -> apiserver::node::Managers {
    apiserver::node::Managers {
        pleg: ctx.pleg.clone(),
        eviction: ctx.eviction.clone(),
    }
}

/// The housekeeping period: the node's status written, garbage collected.
const HOUSEKEEPING: Duration = Duration::from_secs(2);

/// Writes `node.json` in the status dir: the runtime, the PLEG's health
/// and relists, how late housekeeping has run at worst, the pods.
fn write_node_status(ctx: &Ctx, pods: usize, housekeeping_late: Duration) {
    let Some(dir) = &ctx.settings.status_dir else {
        return;
    };
    let since = ctx.pleg.since_last_relist();
    let (last, longest) = ctx.pleg.relist_took();
    let (relists, over) = ctx.pleg.relists();
    let v = serde_json::json!({
        "nodeName": ctx.settings.node_name,
        "runtime": {"name": ctx.cri.name, "version": ctx.cri.version, "endpoint": ctx.settings.runtime_endpoint},
        "pleg": {
            "mode": if ctx.pleg.evented() { "evented" } else { "generic" },
            "secondsSinceLastRelist": since.map(|d| d.as_secs_f64()),
            "healthy": ctx.pleg.healthy(),
            "lastRelistSeconds": last.as_secs_f64(),
            "longestRelistSeconds": longest.as_secs_f64(),
            "relists": relists,
            "relistsOverPeriod": over,
        },
        "housekeeping": {
            "periodSeconds": HOUSEKEEPING.as_secs_f64(),
            "longestLateSeconds": housekeeping_late.as_secs_f64(),
        },
        "pods": pods,
    });
    let tmp = dir.join("node.json.tmp");
    if let Ok(b) = serde_json::to_vec_pretty(&v) {
        if std::fs::write(&tmp, b).is_ok() {
            let _ = std::fs::rename(&tmp, dir.join("node.json"));
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::path::Path;

    /// The rooms in the order of the module header: each may use only
    /// itself and those before it.
    const ROOMS: [&str; 6] = ["kit", "spec", "pods", "managers", "lifecycle", "node"];

    fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                sources(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }

    #[test]
    fn rooms_use_only_rooms_before_them() {
        let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/kubelet");
        let mut wrong = Vec::new();
        for (rank, room) in ROOMS.iter().enumerate() {
            let mut files = Vec::new();
            sources(&base.join(room), &mut files);
            assert!(!files.is_empty(), "room {room} has no files");
            for f in files {
                let text = std::fs::read_to_string(&f).unwrap();
                for (i, _) in text.match_indices("crate::kubelet::") {
                    let rest = &text[i + "crate::kubelet::".len()..];
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    match ROOMS.iter().position(|r| *r == name) {
                        Some(r) if r <= rank => {}
                        _ => wrong.push(format!("{} uses {name}", f.display())),
                    }
                }
            }
        }
        assert!(wrong.is_empty(), "uses against the room order: {wrong:#?}");
    }
}
