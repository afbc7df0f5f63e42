//! `husk bench --breakdown`: a pod's lifecycle stage by stage.
//!
//! Each iteration, each runtime in turn runs a pod with one container
//! through every mutating RPC (RunPodSandbox, CreateContainer,
//! StartContainer, StopContainer, RemoveContainer, StopPodSandbox,
//! RemovePodSandbox), each timed by this client. A runtime that serves
//! husk's admin API also hands over its own stage timings after each
//! iteration (Timings, cleared as read), so every sample of a stage is
//! matched with the RPC it was part of. husk's own share of an RPC is the
//! client's time minus the stages that waited on something not husk (the
//! CNI plugins, the runtime library making the payload's processes). Of a
//! runtime without that API only the RPCs, as seen from outside, are shown.

use super::sandbox::pod_config;
use super::{summarize, turns, Summary, Target};
use crate::api::admin::TimingsRequest;
use crate::api::cri::*;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The RPCs of one iteration, in the order they are made.
pub const RPCS: [&str; 7] = [
    "RunPodSandbox",
    "CreateContainer",
    "StartContainer",
    "StopContainer",
    "RemoveContainer",
    "StopPodSandbox",
    "RemovePodSandbox",
];

/// The RPCs that start a pod, and those that take it down.
pub(super) const START: [&str; 3] = ["RunPodSandbox", "CreateContainer", "StartContainer"];
const TEARDOWN: [&str; 4] = [
    "StopContainer",
    "RemoveContainer",
    "StopPodSandbox",
    "RemovePodSandbox",
];

#[derive(Debug, Clone, Serialize)]
pub struct StageRow {
    pub op: String,
    pub stage: String,
    pub external: bool,
    pub time: Summary,
}

#[derive(Debug, Serialize)]
pub struct BreakdownResult {
    pub runtime: String,
    /// Per RPC as this client timed it.
    pub client: BTreeMap<String, Summary>,
    /// Per RPC, the client's time minus its external stages (runtimes with
    /// stage timings only).
    pub own: BTreeMap<String, Summary>,
    /// Every stage the runtime timed, CNI plugins included.
    pub stages: Vec<StageRow>,
    /// The pod started (sandbox + one container), and husk's own part.
    pub pod_start: Summary,
    pub pod_start_own: Option<Summary>,
    /// The pod taken down (container and sandbox stopped and removed).
    pub teardown: Summary,
    pub teardown_own: Option<Summary>,
}

/// What one iteration of one runtime measured.
#[derive(Default)]
struct Samples {
    client: BTreeMap<&'static str, Vec<Duration>>,
    own: BTreeMap<&'static str, Vec<Duration>>,
    stages: BTreeMap<(String, String), (bool, Vec<Duration>)>,
    pod_start: (Vec<Duration>, Vec<Duration>),
    teardown: (Vec<Duration>, Vec<Duration>),
}

impl Target {
    /// The runtime's stage timings since the last read, cleared; None for
    /// a runtime without husk's admin API.
    pub(super) async fn take_timings(&mut self) -> Option<Vec<crate::api::admin::StageTimings>> {
        let r = self.admin.timings(TimingsRequest { clear: true }).await;
        r.ok().map(|r| r.into_inner().stages)
    }

    /// One pod's whole lifecycle, each RPC timed.
    async fn lifecycle(
        &mut self,
        tag: &str,
        i: usize,
        image: &str,
    ) -> anyhow::Result<BTreeMap<&'static str, Duration>> {
        let mut took = BTreeMap::new();
        let sc = pod_config(tag, i, &self.cgroup_parent);
        let t = Instant::now();
        let sandbox = self.run_pod(sc.clone()).await?;
        took.insert(RPCS[0], t.elapsed());
        let t = Instant::now();
        let id = self
            .runtime
            .create_container(CreateContainerRequest {
                pod_sandbox_id: sandbox.clone(),
                config: Some(super::container::container(image)),
                sandbox_config: Some(sc),
            })
            .await?
            .into_inner()
            .container_id;
        took.insert(RPCS[1], t.elapsed());
        let t = Instant::now();
        self.runtime
            .start_container(StartContainerRequest {
                container_id: id.clone(),
            })
            .await?;
        took.insert(RPCS[2], t.elapsed());
        let t = Instant::now();
        self.runtime
            .stop_container(StopContainerRequest {
                container_id: id.clone(),
                timeout: 0,
            })
            .await?;
        took.insert(RPCS[3], t.elapsed());
        let t = Instant::now();
        self.runtime
            .remove_container(RemoveContainerRequest { container_id: id })
            .await?;
        took.insert(RPCS[4], t.elapsed());
        let t = Instant::now();
        self.runtime
            .stop_pod_sandbox(StopPodSandboxRequest {
                pod_sandbox_id: sandbox.clone(),
            })
            .await?;
        took.insert(RPCS[5], t.elapsed());
        let t = Instant::now();
        self.runtime
            .remove_pod_sandbox(RemovePodSandboxRequest {
                pod_sandbox_id: sandbox,
            })
            .await?;
        took.insert(RPCS[6], t.elapsed());
        Ok(took)
    }
}

impl Samples {
    fn add(
        &mut self,
        took: &BTreeMap<&'static str, Duration>,
        timed: Option<Vec<crate::api::admin::StageTimings>>,
    ) {
        for (op, d) in took {
            self.client.entry(op).or_default().push(*d);
        }
        let sum = |ops: &[&str], m: &BTreeMap<&'static str, Duration>| -> Duration {
            ops.iter().filter_map(|o| m.get(o)).sum()
        };
        self.pod_start.0.push(sum(&START, took));
        self.teardown.0.push(sum(&TEARDOWN, took));
        let Some(timed) = timed else { return };
        let mut external: BTreeMap<&str, Duration> = BTreeMap::new();
        for s in &timed {
            let e = self
                .stages
                .entry((s.op.clone(), s.stage.clone()))
                .or_insert_with(|| (s.external, Vec::new()));
            e.1.extend(s.micros.iter().map(|u| Duration::from_micros(*u)));
            if s.external {
                if let Some(op) = RPCS.iter().find(|o| **o == s.op) {
                    let d: Duration = s.micros.iter().map(|u| Duration::from_micros(*u)).sum();
                    *external.entry(op).or_default() += d;
                }
            }
        }
        let mut own = BTreeMap::new();
        for (op, d) in took {
            let o = d.saturating_sub(external.get(op).copied().unwrap_or_default());
            own.insert(*op, o);
            self.own.entry(op).or_default().push(o);
        }
        self.pod_start.1.push(sum(&START, &own));
        self.teardown.1.push(sum(&TEARDOWN, &own));
    }

    fn result(self, runtime: &str) -> BreakdownResult {
        let own_of = |v: &Vec<Duration>| (!v.is_empty()).then(|| summarize(v));
        BreakdownResult {
            runtime: runtime.to_string(),
            client: self
                .client
                .iter()
                .map(|(k, v)| (k.to_string(), summarize(v)))
                .collect(),
            own: self
                .own
                .iter()
                .map(|(k, v)| (k.to_string(), summarize(v)))
                .collect(),
            stages: self
                .stages
                .into_iter()
                .map(|((op, stage), (external, v))| StageRow {
                    op,
                    stage,
                    external,
                    time: summarize(&v),
                })
                .collect(),
            pod_start: summarize(&self.pod_start.0),
            pod_start_own: own_of(&self.pod_start.1),
            teardown: summarize(&self.teardown.0),
            teardown_own: own_of(&self.teardown.1),
        }
    }
}

/// Interleaved pod lifecycles, stage by stage.
pub async fn bench_breakdown(
    targets: &mut [Target],
    image: &str,
    iterations: usize,
) -> anyhow::Result<Vec<BreakdownResult>> {
    let n = targets.len();
    for (k, t) in targets.iter_mut().enumerate() {
        t.pull(image).await?;
        // A first pod warms caches; its timings are dropped.
        t.lifecycle(&format!("bw{k}"), 0, image).await?;
        t.take_timings().await;
    }
    let mut samples: Vec<Samples> = (0..n).map(|_| Samples::default()).collect();
    for i in 0..iterations {
        for k in turns(i, n) {
            let t = &mut targets[k];
            let took = t.lifecycle(&format!("b{k}"), i, image).await?;
            let timed = t.take_timings().await;
            samples[k].add(&took, timed);
        }
    }
    Ok(samples
        .into_iter()
        .zip(targets.iter())
        .map(|(s, t)| s.result(&t.name))
        .collect())
}

/// The breakdown as a table: per RPC its client time and own share, then
/// its stages (`*` marks a wait on something not husk), per runtime side by
/// side; then the pod's start and teardown.
pub fn report(iterations: usize, results: &[BreakdownResult]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "breakdown, {iterations} interleaved pod lifecycles (p50 / p90 ms; * = not husk's own: plugins, payload)"
    );
    let mut head = format!("{:<20} {:<20}", "operation", "stage");
    for r in results {
        let _ = write!(head, " {:>24}", short(&r.runtime));
    }
    let _ = writeln!(out, "{head}");
    let cell = |s: Option<&Summary>| match s {
        Some(s) => format!("{:>10.2} / {:<10.2}", s.p50_ms, s.p90_ms),
        None => format!("{:>10} / {:<10}", "-", "-"),
    };
    let mut ops: Vec<String> = RPCS.iter().map(|s| s.to_string()).collect();
    for r in results {
        for s in &r.stages {
            if !ops.contains(&s.op) {
                ops.push(s.op.clone());
            }
        }
    }
    for op in &ops {
        let mut rows: Vec<(String, Vec<Option<&Summary>>)> = Vec::new();
        if RPCS.contains(&op.as_str()) {
            rows.push((
                "client".into(),
                results.iter().map(|r| r.client.get(op)).collect(),
            ));
            rows.push((
                "own share".into(),
                results.iter().map(|r| r.own.get(op)).collect(),
            ));
        }
        let mut names: Vec<(String, bool)> = Vec::new();
        for r in results {
            for s in r.stages.iter().filter(|s| &s.op == op) {
                if !names.iter().any(|(n, _)| n == &s.stage) {
                    names.push((s.stage.clone(), s.external));
                }
            }
        }
        for (name, external) in names {
            let label = if external {
                format!("{name} *")
            } else {
                name.clone()
            };
            let cells = results
                .iter()
                .map(|r| {
                    r.stages
                        .iter()
                        .find(|s| &s.op == op && s.stage == name)
                        .map(|s| &s.time)
                })
                .collect();
            rows.push((label, cells));
        }
        for (j, (stage, cells)) in rows.iter().enumerate() {
            let name = if j == 0 { op.as_str() } else { "" };
            let mut line = format!("{name:<20} {stage:<20}");
            for c in cells {
                let _ = write!(line, " {}", cell(*c));
            }
            let _ = writeln!(out, "{line}");
        }
    }
    for r in results {
        let own = |s: &Option<Summary>| {
            s.as_ref()
                .map(|s| format!(", own share {:.2} / {:.2}", s.p50_ms, s.p90_ms))
                .unwrap_or_default()
        };
        let _ = writeln!(
            out,
            "{}: pod start {:.2} / {:.2}{}; teardown {:.2} / {:.2}{}",
            r.runtime,
            r.pod_start.p50_ms,
            r.pod_start.p90_ms,
            own(&r.pod_start_own),
            r.teardown.p50_ms,
            r.teardown.p90_ms,
            own(&r.teardown_own)
        );
    }
    if let [a, b] = results {
        let _ = writeln!(
            out,
            "ratio {} / {}: pod start p50 {:.2}x, teardown p50 {:.2}x",
            a.runtime,
            b.runtime,
            super::ratio(a.pod_start.p50_ms, b.pod_start.p50_ms),
            super::ratio(a.teardown.p50_ms, b.teardown.p50_ms)
        );
    }
    out
}

/// A runtime's name short enough for a column.
fn short(name: &str) -> String {
    name.chars().take(24).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::admin::StageTimings;

    fn took(ms: u64) -> BTreeMap<&'static str, Duration> {
        RPCS.iter()
            .map(|o| (*o, Duration::from_millis(ms)))
            .collect()
    }

    #[test]
    fn own_share_is_the_client_time_minus_the_external_stages() {
        let mut s = Samples::default();
        let timed = vec![
            StageTimings {
                op: "RunPodSandbox".into(),
                stage: "cni wait".into(),
                external: true,
                micros: vec![4_000],
            },
            StageTimings {
                op: "RunPodSandbox".into(),
                stage: "namespaces".into(),
                external: false,
                micros: vec![1_000],
            },
            // A CNI plugin's own op is not an RPC's: it is shown, not
            // subtracted (its wait is the RPC's "cni wait").
            StageTimings {
                op: "CNI ADD".into(),
                stage: "bridge".into(),
                external: true,
                micros: vec![6_000],
            },
        ];
        s.add(&took(10), Some(timed));
        let r = s.result("husk");
        assert_eq!(r.own["RunPodSandbox"].p50_ms, 6.0);
        assert_eq!(r.own["CreateContainer"].p50_ms, 10.0);
        assert_eq!(r.pod_start.p50_ms, 30.0);
        assert_eq!(r.pod_start_own.as_ref().map(|s| s.p50_ms), Some(26.0));
        assert_eq!(r.teardown.p50_ms, 40.0);
        assert_eq!(r.stages.len(), 3);
        let text = report(1, &[r]);
        assert!(text.contains("cni wait *"), "{text}");
        assert!(text.contains("CNI ADD"), "{text}");
        assert!(text.contains("own share 26.00"), "{text}");
    }

    #[test]
    fn a_runtime_without_timings_has_only_client_times() {
        let mut s = Samples::default();
        s.add(&took(5), None);
        let r = s.result("containerd");
        assert!(r.own.is_empty() && r.stages.is_empty());
        assert!(r.pod_start_own.is_none());
        assert_eq!(r.client.len(), RPCS.len());
        let text = report(1, &[r]);
        assert!(text.contains("own share"), "{text}");
    }
}
