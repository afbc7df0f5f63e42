//! The exec benchmark: the ExecSync round trip of `true` in a running
//! busybox container, one pod per runtime, iterations interleaved between
//! the runtimes (alternating who goes first) after a short warm-up.

use super::sandbox::pod_config;
use super::{summarize, turns, Summary, Target};
use crate::api::cri::*;
use anyhow::Context as _;
use serde::Serialize;
use std::time::{Duration, Instant};

/// Execs before measuring (connections, page cache, the shim's first exec).
const WARM_UP: usize = 5;

#[derive(Debug, Serialize)]
pub struct ExecResult {
    pub runtime: String,
    pub exec_sync: Summary,
}

impl Target {
    async fn exec_true(&mut self, id: &str) -> anyhow::Result<Duration> {
        let start = Instant::now();
        let r = self
            .runtime
            .exec_sync(ExecSyncRequest {
                container_id: id.into(),
                cmd: vec!["true".into()],
                timeout: 10,
            })
            .await
            .with_context(|| format!("{}: exec in {id}", self.name))?
            .into_inner();
        let took = start.elapsed();
        anyhow::ensure!(
            r.exit_code == 0,
            "{}: `true` exited {}: {}",
            self.name,
            r.exit_code,
            String::from_utf8_lossy(&r.stderr)
        );
        Ok(took)
    }
}

/// `iterations` ExecSync round trips per target, interleaved.
pub async fn bench_exec(
    targets: &mut [Target],
    image: &str,
    iterations: usize,
) -> anyhow::Result<Vec<ExecResult>> {
    let n = targets.len();
    let mut pods = Vec::new();
    for (k, t) in targets.iter_mut().enumerate() {
        t.pull_app(image).await?;
        let sc = pod_config(&format!("x{k}"), 0, &t.cgroup_parent);
        let sandbox = t.run_pod(sc.clone()).await?;
        let id = t.start_app(&sandbox, &sc, image).await?;
        pods.push((sandbox, id));
    }
    let result = async {
        for (t, (_, id)) in targets.iter_mut().zip(&pods) {
            for _ in 0..WARM_UP {
                t.exec_true(id).await?;
            }
        }
        let mut samples = vec![Vec::new(); n];
        for i in 0..iterations {
            let order = turns(i, n);
            for k in order {
                let d = targets[k].exec_true(&pods[k].1).await?;
                samples[k].push(d);
            }
        }
        anyhow::Ok(samples)
    }
    .await;
    for (t, (sandbox, _)) in targets.iter_mut().zip(&pods) {
        t.stop_remove(sandbox).await?;
    }
    let samples = result?;
    Ok(targets
        .iter()
        .zip(samples)
        .map(|(t, s)| ExecResult {
            runtime: t.name.clone(),
            exec_sync: summarize(&s),
        })
        .collect())
}

/// The human-readable report.
pub fn report(iterations: usize, results: &[ExecResult]) -> String {
    let mut out = format!(
        "ExecSync of `true` in a running container, {iterations} interleaved round trips\n{:<28} {:>10} {:>10} {:>10}\n",
        "runtime", "p50 ms", "p90 ms", "p99 ms"
    );
    for r in results {
        out += &format!(
            "{:<28} {:>10.2} {:>10.2} {:>10.2}\n",
            r.runtime, r.exec_sync.p50_ms, r.exec_sync.p90_ms, r.exec_sync.p99_ms
        );
    }
    if let [a, b] = results {
        out += &format!(
            "ratio {} / {}: p50 {:.2}x, p90 {:.2}x\n",
            a.runtime,
            b.runtime,
            super::ratio(a.exec_sync.p50_ms, b.exec_sync.p50_ms),
            super::ratio(a.exec_sync.p90_ms, b.exec_sync.p90_ms)
        );
    }
    out
}
