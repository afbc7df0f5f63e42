//! The eviction manager, as the kubelet's: every monitoring period it
//! observes the signals (`signals`), and
//!
//! 1. notes every threshold met — hard ones at once, soft ones once met
//!    for their grace period — and keeps the node conditions
//!    (MemoryPressure, DiskPressure, PIDPressure) on while a threshold of
//!    theirs was met within the pressure transition period;
//! 2. for a met disk threshold, first reclaims node-level resources: the
//!    image GC frees unused images, and if that is enough nobody goes;
//! 3. otherwise ranks the active pods for the starved resource (`rank`)
//!    and evicts the first: a `Warning Evicted` event, and the pod is
//!    stopped (grace 0 for a hard threshold, at most
//!    `--eviction-max-pod-grace-period` for a soft one) and left `Failed`
//!    with reason `Evicted` and the kubelet's message. One pod per round.
//!
//! The pod workers act on [`EvictionManager::evicted`]; the node status
//! reads [`EvictionManager::conditions`].

pub mod rank;
pub mod signals;

use super::image_gc::ImageGc;
use crate::kubelet::kit::defaults;
use crate::kubelet::kit::node_config::{Eviction, Signal, Threshold};
use crate::kubelet::kit::recorder::{Recorder, WARNING};
use crate::kubelet::kit::runtime::Cri;
use crate::kubelet::pods::admission::Rejection;
use k8s_openapi::api::core::v1::Pod;
use rank::Candidate;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Why and how a pod is being evicted.
#[derive(Debug, Clone, PartialEq)]
pub struct Evicted {
    pub message: String,
    /// The grace period its containers get.
    pub grace: i64,
}

#[derive(Default)]
struct State {
    /// Soft thresholds met, since when.
    soft_since: HashMap<Signal, Instant>,
    /// Each condition's last threshold met.
    last_met: HashMap<&'static str, Instant>,
    evicted: HashMap<String, Evicted>,
    /// The last pod evicted, and when: no other goes until it is cleaned
    /// up (or 30 s have passed), as the kubelet waits for it.
    cleanup: Option<(String, Instant)>,
}

const CLEANUP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

pub struct EvictionManager {
    cri: Cri,
    cfg: Eviction,
    root: PathBuf,
    image_gc: Arc<ImageGc>,
    events: Recorder,
    node: String,
    state: Mutex<State>,
}

/// A threshold met now: available, the threshold's amount, and whether
/// it is a hard one.
struct Met<'a> {
    t: &'a Threshold,
    available: i64,
    amount: i64,
    hard: bool,
}

impl EvictionManager {
    pub fn new(
        cri: Cri,
        cfg: Eviction,
        root: PathBuf,
        image_gc: Arc<ImageGc>,
        events: Recorder,
        node: &str,
    ) -> EvictionManager {
        EvictionManager {
            cri,
            cfg,
            root,
            image_gc,
            events,
            node: node.into(),
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn period(&self) -> std::time::Duration {
        self.cfg.period
    }

    /// The pressure conditions that are on.
    pub fn conditions(&self) -> HashSet<&'static str> {
        let st = self.lock();
        st.last_met
            .iter()
            .filter(|(_, t)| t.elapsed() < self.cfg.transition)
            .map(|(c, _)| *c)
            .collect()
    }

    /// The eviction manager's admission of a new pod, as the kubelet's:
    /// under MemoryPressure alone only BestEffort pods (that do not
    /// tolerate `node.kubernetes.io/memory-pressure`) are refused; under
    /// any other pressure every pod is; critical pods never.
    pub fn admit(&self, pod: &Pod) -> Result<(), Rejection> {
        admit_under(&self.conditions(), pod)
    }

    /// The pod's eviction, if it was evicted.
    pub fn evicted(&self, uid: &str) -> Option<Evicted> {
        self.lock().evicted.get(uid).cloned()
    }

    /// The pod is gone: its eviction is forgotten.
    pub fn forget(&self, uid: &str) {
        self.lock().evicted.remove(uid);
    }

    async fn observe(&self) -> signals::Observations {
        let image = self
            .cri
            .image_fs()
            .await
            .ok()
            .flatten()
            .map(|f| f.mountpoint);
        let root = self.root.clone();
        tokio::task::spawn_blocking(move || signals::observe(&root, image.as_deref()))
            .await
            .unwrap_or_default()
    }

    /// Thresholds met now (soft ones past their grace period), noting
    /// pressure for the conditions.
    fn met<'a>(&'a self, obs: &signals::Observations) -> Vec<Met<'a>> {
        let now = Instant::now();
        let mut st = self.lock();
        let mut out = Vec::new();
        for t in &self.cfg.hard {
            if let Some((available, amount)) = signals::met(t, obs) {
                st.last_met.insert(t.signal.condition(), now);
                out.push(Met {
                    t,
                    available,
                    amount,
                    hard: true,
                });
            }
        }
        for t in &self.cfg.soft {
            match signals::met(t, obs) {
                Some((available, amount)) => {
                    st.last_met.insert(t.signal.condition(), now);
                    let since = *st.soft_since.entry(t.signal).or_insert(now);
                    if now.duration_since(since) >= t.grace.unwrap_or_default() {
                        out.push(Met {
                            t,
                            available,
                            amount,
                            hard: false,
                        });
                    }
                }
                None => {
                    st.soft_since.remove(&t.signal);
                }
            }
        }
        // Memory first, then the file systems, then PIDs; hard before soft.
        out.sort_by_key(|m| (m.t.signal, !m.hard));
        out
    }

    /// One round; returns the pod evicted, if any. `pods` are the
    /// active pods (not terminal, not already evicted).
    pub async fn synchronize(&self, pods: Vec<Arc<Pod>>) -> Option<Arc<Pod>> {
        let obs = self.observe().await;
        let met = self.met(&obs);
        let top = met.first()?;
        if !self.cleaned_up().await {
            return None;
        }
        let signal = top.t.signal;
        tracing::warn!(
            signal = signal.name(),
            available = top.available,
            threshold = top.amount,
            "eviction threshold met"
        );
        self.events.node(
            &self.node,
            WARNING,
            "EvictionThresholdMet",
            &format!("Attempting to reclaim {}", signal.resource()),
        );
        if matches!(
            signal,
            Signal::NodeFsAvailable
                | Signal::ImageFsAvailable
                | Signal::NodeFsInodesFree
                | Signal::ImageFsInodesFree
        ) {
            let want = (top.amount - top.available).max(1) as u64;
            match self.image_gc.free(want).await {
                Ok(f) => tracing::info!(
                    freed = f.bytes,
                    images = f.removed.len(),
                    "eviction reclaimed images"
                ),
                Err(e) => tracing::warn!(error = %e, "eviction could not reclaim images"),
            }
            let obs = self.observe().await;
            if signals::met(top.t, &obs).is_none() {
                tracing::info!(
                    signal = signal.name(),
                    "reclaiming images relieved the pressure"
                );
                return None;
            }
        }
        let usage = self.usage(signal).await;
        let mut candidates: Vec<Candidate> = pods
            .into_iter()
            .map(|pod| {
                let usage = usage.get(defaults::uid(&pod)).copied().unwrap_or(0);
                Candidate { pod, usage }
            })
            .collect();
        rank::rank(signal, &mut candidates);
        let victim = candidates.into_iter().next()?;
        let pod = victim.pod;
        let message = message(signal, top.amount, top.available, victim.usage, &pod);
        let grace = if top.hard {
            0
        } else {
            self.cfg.max_pod_grace.min(defaults::grace_period(&pod))
        };
        tracing::warn!(pod = %defaults::full_name(&pod), signal = signal.name(), grace, %message, "evicting pod");
        self.events.pod(&pod, WARNING, "Evicted", &message);
        let uid = defaults::uid(&pod).to_string();
        let mut st = self.lock();
        st.evicted.insert(uid.clone(), Evicted { message, grace });
        st.cleanup = Some((uid, Instant::now()));
        Some(pod)
    }

    /// Whether the last evicted pod has stopped (or its time is up).
    async fn cleaned_up(&self) -> bool {
        let Some((uid, at)) = self.lock().cleanup.clone() else {
            return true;
        };
        let gone = match self.cri.pod(&self.node, &uid).await {
            Ok(rt) => rt.running().next().is_none() && !rt.sandboxes.iter().any(|s| s.ready),
            Err(_) => false,
        };
        if gone || at.elapsed() >= CLEANUP_TIMEOUT {
            self.lock().cleanup = None;
            return true;
        }
        tracing::debug!(pod_uid = %uid, "waiting for the evicted pod to stop");
        false
    }

    /// Each pod's usage of the starved resource (by UID).
    async fn usage(&self, signal: Signal) -> HashMap<String, i64> {
        let mut out = HashMap::new();
        let Ok(stats) = self.cri.container_usage().await else {
            return out;
        };
        for s in stats {
            let v = match signal {
                Signal::MemoryAvailable => s.working_set as i64,
                Signal::PidAvailable => 0,
                _ => s.writable_layer as i64,
            };
            *out.entry(s.pod_uid).or_insert(0) += v;
        }
        out
    }
}

fn admit_under(conditions: &HashSet<&'static str>, pod: &Pod) -> Result<(), Rejection> {
    if conditions.is_empty() || rank::is_critical(pod) {
        return Ok(());
    }
    if conditions.len() == 1 && conditions.contains("MemoryPressure") {
        let tolerates = pod
            .spec
            .as_ref()
            .and_then(|s| s.tolerations.as_ref())
            .is_some_and(|ts| {
                ts.iter().any(|t| {
                    t.key.as_deref() == Some("node.kubernetes.io/memory-pressure")
                        || (t.key.is_none() && t.operator.as_deref() == Some("Exists"))
                })
            });
        if defaults::qos_class(pod) != "BestEffort" || tolerates {
            return Ok(());
        }
    }
    let mut c: Vec<&str> = conditions.iter().copied().collect();
    c.sort();
    Err(Rejection {
        reason: "Evicted".into(),
        message: format!("The node had condition: [{}].", c.join(", ")),
    })
}

/// The kubelet's eviction message.
fn message(signal: Signal, amount: i64, available: i64, usage: i64, pod: &Pod) -> String {
    let mut m = format!(
        "The node was low on resource: {}. Threshold quantity: {}, available: {}.",
        signal.resource(),
        signals::quantity(signal, amount),
        signals::quantity(signal, available)
    );
    if matches!(signal, Signal::MemoryAvailable) && usage > 0 {
        m.push_str(&format!(
            " Pod {} was using {}, request is {}.",
            defaults::name(pod),
            signals::quantity(signal, usage),
            signals::quantity(signal, rank::requests(pod, signal))
        ));
    }
    m
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn pod(spec: &str) -> Pod {
        let mut p: Pod = serde_yaml::from_str(&format!(
            "metadata: {{name: p, uid: u, annotations: {{kubernetes.io/config.source: api}}}}\nspec:\n{spec}"
        ))
        .unwrap();
        defaults::apply(&mut p);
        p
    }

    #[test]
    fn pressure_refuses_new_pods_as_the_kubelet_does() {
        let be = pod("  containers: [{name: c, image: i}]\n");
        let g = pod(
            "  containers: [{name: c, image: i, resources: {limits: {cpu: 1, memory: 1Gi}}}]\n",
        );
        let tol = pod("  tolerations: [{key: node.kubernetes.io/memory-pressure, operator: Exists, effect: NoSchedule}]\n  containers: [{name: c, image: i}]\n");
        let none = HashSet::new();
        assert!(admit_under(&none, &be).is_ok());
        let mem = HashSet::from(["MemoryPressure"]);
        let r = admit_under(&mem, &be).unwrap_err();
        assert_eq!(r.reason, "Evicted");
        assert_eq!(r.message, "The node had condition: [MemoryPressure].");
        assert!(admit_under(&mem, &g).is_ok());
        assert!(admit_under(&mem, &tol).is_ok());
        let disk = HashSet::from(["DiskPressure"]);
        assert!(admit_under(&disk, &g).is_err());
    }
}
