//! The transport benchmark: the round trip of the cheapest CRI call
//! (Version) and of a small read (ListPodSandbox), interleaved between the
//! runtimes. It measures what every RPC pays for the socket, HTTP/2 and
//! gRPC layers, so a change there (husk's HTTP/2 front) shows in it.

use super::{summarize, turns, Summary, Target};
use crate::api::cri::{ListPodSandboxRequest, VersionRequest};
use serde::Serialize;
use std::time::{Duration, Instant};

/// Calls before measuring (connection set-up, first allocations).
const WARM_UP: usize = 50;

#[derive(Debug, Serialize)]
pub struct RpcResult {
    pub runtime: String,
    pub version: Summary,
    pub list_pod_sandbox: Summary,
}

impl Target {
    async fn version_rtt(&mut self) -> anyhow::Result<Duration> {
        let t = Instant::now();
        self.runtime
            .version(VersionRequest {
                version: "v1".into(),
            })
            .await?;
        Ok(t.elapsed())
    }

    async fn list_rtt(&mut self) -> anyhow::Result<Duration> {
        let t = Instant::now();
        self.runtime
            .list_pod_sandbox(ListPodSandboxRequest::default())
            .await?;
        Ok(t.elapsed())
    }
}

/// `iterations` of each call per target, interleaved.
pub async fn bench_rpc(
    targets: &mut [Target],
    iterations: usize,
) -> anyhow::Result<Vec<RpcResult>> {
    let n = targets.len();
    for t in targets.iter_mut() {
        for _ in 0..WARM_UP {
            t.version_rtt().await?;
        }
    }
    let mut version = vec![Vec::new(); n];
    let mut list = vec![Vec::new(); n];
    for i in 0..iterations {
        let order = turns(i, n);
        for k in order {
            version[k].push(targets[k].version_rtt().await?);
            list[k].push(targets[k].list_rtt().await?);
        }
    }
    Ok(targets
        .iter()
        .zip(version.iter().zip(&list))
        .map(|(t, (v, l))| RpcResult {
            runtime: t.name.clone(),
            version: summarize(v),
            list_pod_sandbox: summarize(l),
        })
        .collect())
}

/// The human-readable report.
pub fn report(iterations: usize, results: &[RpcResult]) -> String {
    let mut out = format!(
        "RPC round trips, {iterations} interleaved per call\n{:<28} {:>14} {:>14} {:>16} {:>16}\n",
        "runtime", "Version p50 µs", "Version p99 µs", "ListPodSandbox p50", "ListPodSandbox p99"
    );
    let us = |ms: f64| ms * 1e3;
    for r in results {
        out += &format!(
            "{:<28} {:>14.1} {:>14.1} {:>16.1} {:>16.1}\n",
            r.runtime,
            us(r.version.p50_ms),
            us(r.version.p99_ms),
            us(r.list_pod_sandbox.p50_ms),
            us(r.list_pod_sandbox.p99_ms)
        );
    }
    if let [a, b] = results {
        out += &format!(
            "ratio {} / {}: Version p50 {:.2}x, ListPodSandbox p50 {:.2}x\n",
            a.runtime,
            b.runtime,
            super::ratio(a.version.p50_ms, b.version.p50_ms),
            super::ratio(a.list_pod_sandbox.p50_ms, b.list_pod_sandbox.p50_ms)
        );
    }
    out
}
