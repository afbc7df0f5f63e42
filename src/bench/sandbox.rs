//! The pod-sandbox benchmark: RunPodSandbox, Stop+RemovePodSandbox, and
//! the runtime's memory with 1, 10, 50… pods running.

use super::{procs, summarize, turns, Summary, Target};
use crate::api::cri::*;
use serde::Serialize;
use std::time::{Duration, Instant};

/// How long the runtimes are left alone before their memory is read.
pub(super) const IDLE: Duration = Duration::from_secs(3);

#[derive(Debug, Serialize)]
pub struct MemoryPoint {
    pub pods: usize,
    /// Mean RSS of one per-pod monitor (husk shim, containerd-shim-runc-v2).
    pub shim_rss_mb: f64,
    /// Mean proportional set size of one monitor (shared pages split).
    pub shim_pss_mb: f64,
    /// Server plus monitors.
    pub total_rss_mb: f64,
    /// (total − idle server) / pods.
    pub per_pod_mb: f64,
}

#[derive(Debug, Serialize)]
pub struct SandboxResult {
    pub runtime: String,
    pub run: Summary,
    pub stop_remove: Summary,
    pub memory: Vec<MemoryPoint>,
}

/// A benchmark pod's config, unique per `tag` and `i`, under `parent`
/// (`Target::cgroup_parent`: the form the runtime's cgroup driver takes;
/// containerd reads it from each CreateContainer's sandbox config). Its
/// namespaces are those the kubelet asks for a plain pod: the pod's own
/// network and IPC, a PID namespace per container.
pub(super) fn pod_config(tag: &str, i: usize, parent: &str) -> PodSandboxConfig {
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: format!("bench-{tag}-{i}"),
            uid: format!("{:016x}", rand::random::<u64>()),
            namespace: "husk-bench".into(),
            attempt: 0,
        }),
        hostname: format!("bench-{i}"),
        log_directory: format!("/tmp/husk-bench-logs/{tag}-{i}"),
        linux: Some(LinuxPodSandboxConfig {
            cgroup_parent: parent.into(),
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(NamespaceOption {
                    network: NamespaceMode::Pod as i32,
                    pid: NamespaceMode::Container as i32,
                    ipc: NamespaceMode::Pod as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

impl Target {
    pub(super) async fn run_pod(&mut self, c: PodSandboxConfig) -> anyhow::Result<String> {
        Ok(self
            .runtime
            .run_pod_sandbox(RunPodSandboxRequest {
                config: Some(c),
                runtime_handler: self.handler.clone(),
            })
            .await?
            .into_inner()
            .pod_sandbox_id)
    }

    pub(super) async fn stop_remove(&mut self, id: &str) -> anyhow::Result<()> {
        self.runtime
            .stop_pod_sandbox(StopPodSandboxRequest {
                pod_sandbox_id: id.into(),
            })
            .await?;
        self.runtime
            .remove_pod_sandbox(RemovePodSandboxRequest {
                pod_sandbox_id: id.into(),
            })
            .await?;
        Ok(())
    }
}

/// Interleaved sandbox lifecycles, then memory at each pod count.
pub async fn bench_sandbox(
    targets: &mut [Target],
    iterations: usize,
    pod_counts: &[usize],
) -> anyhow::Result<Vec<SandboxResult>> {
    let n = targets.len();
    let mut run = vec![Vec::new(); n];
    let mut sr = vec![Vec::new(); n];
    // Warm-up: the pause image, CNI plugins in the page cache.
    for (k, t) in targets.iter_mut().enumerate() {
        let id = t
            .run_pod(pod_config(&format!("warm{k}"), 0, &t.cgroup_parent))
            .await?;
        t.stop_remove(&id).await?;
    }
    for i in 0..iterations {
        let order = turns(i, n);
        for k in order {
            let t = &mut targets[k];
            let start = Instant::now();
            let id = t
                .run_pod(pod_config(&format!("t{k}"), i, &t.cgroup_parent))
                .await?;
            run[k].push(start.elapsed());
            let start = Instant::now();
            t.stop_remove(&id).await?;
            sr[k].push(start.elapsed());
        }
    }
    let mut memory: Vec<Vec<MemoryPoint>> = (0..n).map(|_| Vec::new()).collect();
    for (k, t) in targets.iter_mut().enumerate() {
        tokio::time::sleep(IDLE).await;
        let idle = t.rss_bytes() as f64;
        for &pods in pod_counts {
            let mut ids = Vec::with_capacity(pods);
            for i in 0..pods {
                ids.push(
                    t.run_pod(pod_config(&format!("m{k}-{pods}"), i, &t.cgroup_parent))
                        .await?,
                );
            }
            tokio::time::sleep(IDLE).await;
            let shims = t.shims();
            let shim_rss: Vec<u64> = shims.iter().map(|p| procs::rss_bytes(*p)).collect();
            let shim_pss: u64 = shims.iter().map(|p| procs::pss_bytes(*p)).sum();
            let total = t.rss_bytes() as f64;
            memory[k].push(MemoryPoint {
                pods,
                shim_rss_mb: if shim_rss.is_empty() {
                    0.0
                } else {
                    shim_rss.iter().sum::<u64>() as f64 / shim_rss.len() as f64 / 1e6
                },
                shim_pss_mb: shim_pss as f64 / shims.len().max(1) as f64 / 1e6,
                total_rss_mb: total / 1e6,
                per_pod_mb: (total - idle) / pods.max(1) as f64 / 1e6,
            });
            for id in ids {
                t.stop_remove(&id).await?;
            }
        }
    }
    Ok(targets
        .iter()
        .zip(memory)
        .enumerate()
        .map(|(k, (t, mem))| SandboxResult {
            runtime: t.name.clone(),
            run: summarize(&run[k]),
            stop_remove: summarize(&sr[k]),
            memory: mem,
        })
        .collect())
}
