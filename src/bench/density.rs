//! `husk bench --density N`: fills each runtime in turn to N running pods
//! (a pause and one `sleep` container each, on the runtime's CNI network),
//! one pod after another through the CRI. At each checkpoint it measures
//! the start of the last pods, the kubelet's relist calls (ListPodSandbox,
//! ListContainers, called every second) and housekeeping calls
//! (ListContainerStats, ListPodSandboxStats), a Prometheus scrape (if
//! `--metrics-address` names the first runtime's), the runtime's memory (PSS of
//! its server and monitors), processes and threads. Then, for the first
//! runtime when `--restart-cmd` is given, it kills and restarts the server
//! and times the recovery of every pod. Last, it stops and removes every
//! pod. A runtime that fails a pod, or takes longer than the pod timeout,
//! stops its fill there: the report says where and why.

pub use super::density_report::{report, Checkpoint, DensityResult};
use super::sandbox::{pod_config, IDLE};
use super::{procs, summarize, Summary, Target};
use crate::api::cri::*;
use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// What a density run was asked for.
pub struct DensityArgs {
    /// (endpoint, runtime handler) of each runtime, measured in this order.
    pub targets: Vec<(String, String)>,
    pub pods: usize,
    pub checkpoints: Vec<usize>,
    pub image: String,
    /// A shell command that kills the first runtime's server (`kill -9`)
    /// and starts it again; the recovery is timed from its exit.
    pub restart_cmd: Option<String>,
    /// The longest one pod's start may take before the fill stops.
    pub pod_timeout: Duration,
    /// Pods stopped and removed at once at the end (the kubelet's pod
    /// workers run in parallel too).
    pub remove_parallel: usize,
    /// The first runtime's Prometheus endpoint (host:port), scraped at
    /// each checkpoint.
    pub metrics: Option<String>,
    pub json: bool,
}

/// Pods whose start times each checkpoint summarizes.
const WINDOW: usize = 50;
/// Samples of each list call, and of each stats call, per checkpoint.
const LIST_SAMPLES: usize = 20;
const STATS_SAMPLES: usize = 5;
/// How long a restarted runtime has to recover every pod.
const RECOVERY_LIMIT: Duration = Duration::from_secs(180);

pub async fn run(a: DensityArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        !a.image.is_empty(),
        "--image is required for --density (each pod runs a container of it)"
    );
    anyhow::ensure!(a.pods > 0, "--density needs at least one pod");
    let mut checkpoints: Vec<usize> = a
        .checkpoints
        .iter()
        .copied()
        .filter(|c| *c > 0 && *c < a.pods)
        .collect();
    checkpoints.push(a.pods);
    checkpoints.sort_unstable();
    checkpoints.dedup();
    let load_before = super::loadavg();
    let mut results = Vec::new();
    for (k, (endpoint, handler)) in a.targets.iter().enumerate() {
        let mut t = super::named_target(endpoint, handler).await?;
        let (restart, metrics) = match k {
            0 => (a.restart_cmd.as_deref(), a.metrics.as_deref()),
            _ => (None, None),
        };
        eprintln!("density: filling {} to {} pods", t.name, a.pods);
        results.push(fill_and_drain(&mut t, &a, &checkpoints, k, restart, metrics).await?);
    }
    let load_after = super::loadavg();
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "density": results,
                "load_before": load_before,
                "load_after": load_after,
            }))?
        );
    } else {
        print!("{}", report(&results));
        println!("load average: {load_before} -> {load_after}");
    }
    Ok(())
}

async fn fill_and_drain(
    t: &mut Target,
    a: &DensityArgs,
    checkpoints: &[usize],
    k: usize,
    restart: Option<&str>,
    metrics: Option<&str>,
) -> anyhow::Result<DensityResult> {
    t.pull_app(&a.image).await?;
    tokio::time::sleep(IDLE).await;
    let idle_pss = t.pss_bytes() as f64;
    let mut pods: Vec<String> = Vec::with_capacity(a.pods);
    let mut starts: Vec<Duration> = Vec::with_capacity(a.pods);
    let mut marks = Vec::new();
    let mut stopped = None;
    // The CNI ADD totals where each checkpoint's window of starts begins.
    let mut adds_from = HashMap::new();
    for i in 0..a.pods {
        if checkpoints.iter().any(|c| c.saturating_sub(WINDOW) == i) {
            if let Some(addr) = metrics {
                adds_from.insert(i, super::cni_share::read(addr).await);
            }
            // The stages timed from here on are the window's.
            t.take_timings().await;
        }
        let sc = pod_config(&format!("d{k}"), i, &t.cgroup_parent);
        // The kubelet makes a pod's log directory and its containers' (CRI-O
        // refuses a container whose log directory is missing).
        let _ = std::fs::create_dir_all(Path::new(&sc.log_directory).join("app"));
        let began = Instant::now();
        let started = tokio::time::timeout(a.pod_timeout, async {
            let id = t.run_pod(sc.clone()).await?;
            pods.push(id.clone());
            t.start_app(&id, &sc, &a.image).await
        })
        .await;
        match started {
            Ok(Ok(_)) => starts.push(began.elapsed()),
            Ok(Err(e)) => {
                stopped = Some(format!("pod {}: {e:#}", i + 1));
                break;
            }
            Err(_) => {
                stopped = Some(format!(
                    "pod {}: not started within {:?}",
                    i + 1,
                    a.pod_timeout
                ));
                break;
            }
        }
        if checkpoints.contains(&(i + 1)) {
            let from = starts.len().saturating_sub(WINDOW);
            let timed = t.take_timings().await.unwrap_or_default();
            let mut m = measure(t, &starts[from..], idle_pss, metrics).await;
            if let Some(addr) = metrics {
                let before = adds_from
                    .get(&(i + 1).saturating_sub(WINDOW))
                    .copied()
                    .flatten();
                let after = super::cni_share::read(addr).await;
                m.own_share_ms = super::cni_share::own_share_ms(&starts[from..], before, after);
            }
            m.stages = super::density_stages::means(&timed);
            eprintln!(
                "density: {} at {} pods: start p50 {:.1} ms (less CNI {}), lists {:.1}/{:.1} ms, {:.2} MB a pod",
                t.name,
                m.pods,
                m.start.p50_ms,
                m.own_share_ms.map_or("-".into(), |s| format!("{s:.1} ms")),
                m.list_sandboxes.p50_ms,
                m.list_containers.p50_ms,
                m.per_pod_mb
            );
            marks.push(m);
        }
    }
    if let Some(s) = &stopped {
        eprintln!("density: {} stopped: {s}", t.name);
    }
    let reached = starts.len();
    let (mut recovery_s, mut recovery_error) = (None, None);
    if let Some(cmd) = restart {
        match recover(t, cmd, reached).await {
            Ok(d) => recovery_s = Some(d.as_secs_f64()),
            Err(e) => recovery_error = Some(format!("{e:#}")),
        }
    }
    let began = Instant::now();
    let remove_failures = remove_all(t, &pods, a.remove_parallel.max(1)).await;
    Ok(DensityResult {
        runtime: t.name.clone(),
        idle_pss_mb: idle_pss / 1e6,
        checkpoints: marks,
        reached,
        stopped,
        recovery_s,
        recovery_error,
        remove_all_s: began.elapsed().as_secs_f64(),
        remove_failures,
    })
}

/// Times `n` calls of `call`; None if the runtime refuses it.
async fn sample<F, Fut>(n: usize, mut call: F) -> Option<Summary>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), tonic::Status>>,
{
    let mut d = Vec::with_capacity(n);
    for _ in 0..n {
        let began = Instant::now();
        call().await.ok()?;
        d.push(began.elapsed());
    }
    Some(summarize(&d))
}

/// Times `n` plain `GET /metrics` of `addr`; None if one fails.
async fn scrape(addr: &str, n: usize) -> Option<Summary> {
    let mut d = Vec::with_capacity(n);
    for _ in 0..n {
        let began = Instant::now();
        super::cni_share::get_metrics(addr).await?;
        d.push(began.elapsed());
    }
    Some(summarize(&d))
}

async fn measure(
    t: &mut Target,
    starts: &[Duration],
    idle_pss: f64,
    metrics: Option<&str>,
) -> Checkpoint {
    let pods = t.sandbox_count().await;
    let rt = t.runtime.clone();
    let list_sandboxes = sample(LIST_SAMPLES, || {
        let mut rt = rt.clone();
        async move {
            rt.list_pod_sandbox(ListPodSandboxRequest::default())
                .await
                .map(drop)
        }
    })
    .await;
    let list_containers = sample(LIST_SAMPLES, || {
        let mut rt = rt.clone();
        async move {
            rt.list_containers(ListContainersRequest::default())
                .await
                .map(drop)
        }
    })
    .await;
    let container_stats = sample(STATS_SAMPLES, || {
        let mut rt = rt.clone();
        async move {
            rt.list_container_stats(ListContainerStatsRequest::default())
                .await
                .map(drop)
        }
    })
    .await;
    let sandbox_stats = sample(STATS_SAMPLES, || {
        let mut rt = rt.clone();
        async move {
            rt.list_pod_sandbox_stats(ListPodSandboxStatsRequest::default())
                .await
                .map(drop)
        }
    })
    .await;
    let metrics_scrape = match metrics {
        Some(addr) => scrape(addr, LIST_SAMPLES).await,
        None => None,
    };
    tokio::time::sleep(IDLE).await;
    let servers = t.servers();
    let monitors = t.shims();
    let all: Vec<u32> = servers.iter().chain(&monitors).copied().collect();
    let pss: u64 = all.iter().map(|p| procs::pss_bytes(*p)).sum();
    Checkpoint {
        pods,
        start: summarize(starts),
        list_sandboxes: list_sandboxes.unwrap_or_else(|| summarize(&[])),
        list_containers: list_containers.unwrap_or_else(|| summarize(&[])),
        container_stats,
        sandbox_stats,
        metrics_scrape,
        own_share_ms: None,
        stages: Vec::new(),
        pss_mb: pss as f64 / 1e6,
        per_pod_mb: (pss as f64 - idle_pss) / pods.max(1) as f64 / 1e6,
        server_rss_mb: servers.iter().map(|p| procs::rss_bytes(*p)).sum::<u64>() as f64 / 1e6,
        servers: servers.len(),
        monitors: monitors.len(),
        threads: all.iter().map(|p| procs::threads(*p)).sum(),
    }
}

impl Target {
    /// Ready pods the runtime lists (0 if it does not answer).
    async fn sandbox_count(&mut self) -> usize {
        self.ready_pods().await.map(|p| p.len()).unwrap_or(0)
    }

    /// Ready pods and their IPs.
    async fn ready_pods(&mut self) -> Result<HashMap<String, String>, tonic::Status> {
        let ready = PodSandboxFilter {
            state: Some(PodSandboxStateValue {
                state: PodSandboxState::SandboxReady as i32,
            }),
            ..Default::default()
        };
        let items = self
            .runtime
            .list_pod_sandbox(ListPodSandboxRequest {
                filter: Some(ready),
            })
            .await?
            .into_inner()
            .items;
        let mut out = HashMap::new();
        for p in items {
            let ip = self
                .runtime
                .pod_sandbox_status(PodSandboxStatusRequest {
                    pod_sandbox_id: p.id.clone(),
                    verbose: false,
                })
                .await?
                .into_inner()
                .status
                .and_then(|s| s.network)
                .map(|n| n.ip)
                .unwrap_or_default();
            out.insert(p.id, ip);
        }
        Ok(out)
    }

    async fn running_containers(&mut self) -> Result<usize, tonic::Status> {
        let running = ContainerFilter {
            state: Some(ContainerStateValue {
                state: ContainerState::ContainerRunning as i32,
            }),
            ..Default::default()
        };
        Ok(self
            .runtime
            .list_containers(ListContainersRequest {
                filter: Some(running),
            })
            .await?
            .into_inner()
            .containers
            .len())
    }
}

/// Runs `cmd` (which kills and restarts the server), then waits until the
/// runtime lists every pod ready with the IP it had and every container
/// running. The time counts from the command's exit.
async fn recover(t: &mut Target, cmd: &str, reached: usize) -> anyhow::Result<Duration> {
    let before = t.ready_pods().await?;
    anyhow::ensure!(
        before.len() == reached,
        "{} ready pods listed before the restart, {reached} started",
        before.len()
    );
    let status = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .status()
        .await?;
    anyhow::ensure!(status.success(), "the restart command failed: {status}");
    let began = Instant::now();
    let mut last = String::from("the server did not answer");
    while began.elapsed() < RECOVERY_LIMIT {
        match check_recovered(&t.endpoint, &t.handler, &before).await {
            Ok(Some(fresh)) => {
                let took = began.elapsed();
                *t = fresh;
                return Ok(took);
            }
            Ok(None) => {}
            Err(e) => last = format!("{e:#}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    anyhow::bail!("not recovered within {RECOVERY_LIMIT:?}: {last}")
}

/// A fresh connection if every pod of `before` is ready with its IP and
/// as many containers run; None if not yet.
async fn check_recovered(
    endpoint: &str,
    handler: &str,
    before: &HashMap<String, String>,
) -> anyhow::Result<Option<Target>> {
    let mut t = super::named_target(endpoint, handler).await?;
    let now = t.ready_pods().await?;
    if now != *before {
        let missing = before.iter().filter(|(id, ip)| now.get(*id) != Some(ip));
        anyhow::bail!("{} pods not back with their IP", missing.count());
    }
    Ok((t.running_containers().await? == before.len()).then_some(t))
}

/// Stops and removes `pods`, `parallel` at a time; returns the failures.
async fn remove_all(t: &Target, pods: &[String], parallel: usize) -> usize {
    let chunk = pods.len().div_ceil(parallel).max(1);
    let mut tasks = Vec::new();
    for part in pods.chunks(chunk) {
        let mut rt = t.runtime.clone();
        let part = part.to_vec();
        tasks.push(tokio::spawn(async move {
            let mut failed = 0;
            for id in part {
                let stop = rt
                    .stop_pod_sandbox(StopPodSandboxRequest {
                        pod_sandbox_id: id.clone(),
                    })
                    .await;
                let rm = rt
                    .remove_pod_sandbox(RemovePodSandboxRequest { pod_sandbox_id: id })
                    .await;
                if stop.is_err() || rm.is_err() {
                    failed += 1;
                }
            }
            failed
        }));
    }
    let mut failed = 0;
    for task in tasks {
        failed += task.await.unwrap_or(chunk);
    }
    failed
}
