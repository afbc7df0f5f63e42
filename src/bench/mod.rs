//! `husk bench`: the same CRI client measuring any runtime, side by side.
//!
//! With `--vs`, iterations alternate between the two endpoints so both see
//! the same machine load; the report gives p50/p90/p99 per operation, the
//! ratio of p50s, and the runtimes' RSS found through their sockets.

pub mod breakdown;
pub mod cli;
pub mod cni_share;
pub mod container;
pub mod density;
pub mod density_report;
pub mod density_stages;
pub mod exec;
pub mod pod_startup;
pub mod procs;
pub mod rpc;
pub mod sandbox;
pub mod stream;
pub mod userns;

use crate::api::cri::image_service_client::ImageServiceClient;
use crate::api::cri::runtime_service_client::RuntimeServiceClient;
use crate::api::cri::{
    CgroupDriver, ImageSpec, ImageStatusRequest, PullImageRequest, RemoveImageRequest,
    RuntimeConfigRequest,
};
use anyhow::Context as _;
use serde::Serialize;
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// The order in which `n` runtimes take iteration `i`: alternating who
/// goes first, so neither always meets a warmer or a busier machine.
pub fn turns(i: usize, n: usize) -> Vec<usize> {
    if i.is_multiple_of(2) {
        (0..n).collect()
    } else {
        (0..n).rev().collect()
    }
}

/// `a / b`, with b = 0 read as the smallest positive number.
pub fn ratio(a: f64, b: f64) -> f64 {
    a / b.max(f64::MIN_POSITIVE)
}

/// Percentiles of a set of durations.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub n: usize,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
}

pub fn summarize(samples: &[Duration]) -> Summary {
    let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| -> f64 {
        if ms.is_empty() {
            return 0.0;
        }
        let idx = ((p / 100.0) * (ms.len() - 1) as f64).round() as usize;
        ms[idx.min(ms.len() - 1)]
    };
    Summary {
        n: ms.len(),
        p50_ms: pct(50.0),
        p90_ms: pct(90.0),
        p99_ms: pct(99.0),
    }
}

/// One runtime under test.
pub struct Target {
    pub name: String,
    pub endpoint: String,
    pub images: ImageServiceClient<Channel>,
    pub runtime: RuntimeServiceClient<Channel>,
    /// husk's admin API (other runtimes answer Unimplemented).
    pub admin: crate::api::admin::admin_client::AdminClient<Channel>,
    /// The pods' cgroup parent in the form the runtime's cgroup driver
    /// takes (RuntimeConfig): `husk-bench.slice` or `/husk-bench`.
    pub cgroup_parent: String,
    /// The runtime handler its pods name (`""`: its default).
    pub handler: String,
}

impl Target {
    /// Pulls the image a benchmark's containers run (no auth).
    /// A runtime still recovering its state (Unavailable: a server just
    /// started, or restarted) is asked again for up to 30 s.
    pub(super) async fn pull_app(&mut self, image: &str) -> anyhow::Result<()> {
        use anyhow::Context;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let r = self
                .images
                .pull_image(PullImageRequest {
                    image: Some(ImageSpec {
                        image: image.into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .await;
            match r {
                Err(s)
                    if s.code() == tonic::Code::Unavailable
                        && std::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                r => {
                    r.with_context(|| format!("{}: pull {image}", self.name))?;
                    return Ok(());
                }
            }
        }
    }

    pub async fn connect(name: &str, endpoint: &str) -> anyhow::Result<Target> {
        let ch = crate::api::connect(endpoint).await?;
        let mut runtime = RuntimeServiceClient::new(ch.clone()).max_decoding_message_size(64 << 20);
        // containerd 1.6 answers cgroupfs whatever runc's SystemdCgroup
        // says: the caller's HUSK_BENCH_SLICE tells it for such a runtime.
        let systemd = std::env::var_os("HUSK_BENCH_SLICE").is_some()
            || match runtime.runtime_config(RuntimeConfigRequest {}).await {
                Ok(r) => {
                    r.into_inner().linux.map(|l| l.cgroup_driver)
                        == Some(CgroupDriver::Systemd as i32)
                }
                Err(_) => false,
            };
        Ok(Target {
            name: name.to_string(),
            endpoint: endpoint.to_string(),
            images: ImageServiceClient::new(ch.clone()).max_decoding_message_size(64 << 20),
            admin: crate::api::admin::admin_client::AdminClient::new(ch)
                .max_decoding_message_size(64 << 20),
            runtime,
            cgroup_parent: if systemd {
                "husk-bench.slice".into()
            } else {
                "/husk-bench".into()
            },
            handler: String::new(),
        })
    }

    fn socket_path(&self) -> &std::path::Path {
        std::path::Path::new(
            self.endpoint
                .strip_prefix("unix://")
                .unwrap_or(&self.endpoint),
        )
    }

    /// The server and its helpers: descendants, and monitors reparented
    /// away that name a path under the socket's directory
    /// (`husk shim --dir /run/husk/s/…`, `containerd-shim -address /run/containerd/…`).
    fn processes(&self) -> Vec<u32> {
        let owners = procs::socket_owners(self.socket_path());
        let mut all = procs::runtime_processes(&owners, &[]);
        for p in self.shims() {
            if !all.contains(&p) {
                all.push(p);
            }
        }
        all
    }

    /// The runtime's per-pod monitors, known by what they are
    /// (`procs::is_monitor`).
    pub fn shims(&self) -> Vec<u32> {
        let Some(dir) = self.socket_path().parent() else {
            return Vec::new();
        };
        procs::monitors_under(dir)
    }

    /// The server: the process listening on the runtime's socket.
    pub fn servers(&self) -> Vec<u32> {
        procs::socket_owners(self.socket_path())
    }

    /// RSS of the server and its helper processes.
    pub fn rss_bytes(&self) -> u64 {
        self.processes().iter().map(|p| procs::rss_bytes(*p)).sum()
    }

    /// Proportional set size of the server and its helpers (shared pages,
    /// the binary's among them, split between the processes mapping them).
    pub fn pss_bytes(&self) -> u64 {
        self.processes().iter().map(|p| procs::pss_bytes(*p)).sum()
    }

    /// CPU seconds the server and its helpers have used.
    pub fn cpu_seconds(&self) -> f64 {
        self.processes()
            .iter()
            .map(|p| procs::cpu_seconds(*p))
            .sum()
    }

    fn spec(image: &str) -> Option<ImageSpec> {
        Some(ImageSpec {
            image: image.to_string(),
            ..Default::default()
        })
    }

    /// Pulls `image` (nothing is timed).
    pub async fn pull(&mut self, image: &str) -> anyhow::Result<()> {
        self.images
            .pull_image(PullImageRequest {
                image: Self::spec(image),
                ..Default::default()
            })
            .await?;
        Ok(())
    }

    /// Removes the image (so the next pull is cold), then times a pull.
    pub async fn cold_pull(&mut self, image: &str) -> anyhow::Result<(Duration, u64)> {
        self.images
            .remove_image(RemoveImageRequest {
                image: Target::spec(image),
            })
            .await
            .with_context(|| format!("{}: remove {image}", self.name))?;
        let start = Instant::now();
        self.images
            .pull_image(PullImageRequest {
                image: Target::spec(image),
                ..Default::default()
            })
            .await
            .with_context(|| format!("{}: pull {image}", self.name))?;
        let took = start.elapsed();
        let size = self
            .images
            .image_status(ImageStatusRequest {
                image: Target::spec(image),
                verbose: false,
            })
            .await?
            .into_inner()
            .image
            .map(|i| i.size)
            .unwrap_or(0);
        Ok((took, size))
    }
}

/// Results of the pull benchmark for one runtime.
#[derive(Debug, Serialize)]
pub struct PullResult {
    pub runtime: String,
    pub pull: Summary,
    pub image_bytes: u64,
    pub mb_per_s_p50: f64,
    pub cpu_ms_per_pull: f64,
    pub rss_idle_before_mb: f64,
    pub rss_idle_after_mb: f64,
}

/// Interleaved cold pulls of `image` on each target.
pub async fn bench_pull(
    targets: &mut [Target],
    image: &str,
    iterations: usize,
) -> anyhow::Result<Vec<PullResult>> {
    // Idle before: no RPC for a few seconds (husk trims itself after 2 s).
    tokio::time::sleep(sandbox::IDLE).await;
    let before: Vec<u64> = targets.iter().map(Target::rss_bytes).collect();
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); targets.len()];
    let mut sizes = vec![0u64; targets.len()];
    let mut cpu = vec![0f64; targets.len()];
    // One warm-up round (connections, page cache of the registry's blobs).
    for t in targets.iter_mut() {
        t.cold_pull(image).await?;
    }
    for i in 0..iterations {
        // Alternate who goes first so neither always runs on a warmer machine.
        let order = turns(i, targets.len());
        for k in order {
            let c0 = targets[k].cpu_seconds();
            let (d, size) = targets[k].cold_pull(image).await?;
            cpu[k] += targets[k].cpu_seconds() - c0;
            samples[k].push(d);
            sizes[k] = size;
        }
    }
    // Idle means idle: past tokio's 10 s keep-alive of blocking threads
    // and HTTP connection pools, as a node between pulls would be.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let bytes = sizes.first().copied().unwrap_or(0);
    Ok(targets
        .iter()
        .enumerate()
        .map(|(k, t)| {
            let s = summarize(&samples[k]);
            PullResult {
                runtime: t.name.clone(),
                mb_per_s_p50: if s.p50_ms > 0.0 {
                    bytes as f64 / 1e6 / (s.p50_ms / 1e3)
                } else {
                    0.0
                },
                pull: s,
                cpu_ms_per_pull: cpu[k] * 1e3 / iterations.max(1) as f64,
                image_bytes: bytes,
                rss_idle_before_mb: before[k] as f64 / 1e6,
                rss_idle_after_mb: t.rss_bytes() as f64 / 1e6,
            }
        })
        .collect())
}

/// Connects to a runtime and names it by its Version answer (and the
/// handler its pods name, if not its default).
pub async fn named_target(endpoint: &str, handler: &str) -> anyhow::Result<Target> {
    let mut t = Target::connect("runtime", endpoint).await?;
    t.handler = handler.to_string();
    let v = t
        .runtime
        .version(crate::api::cri::VersionRequest {
            version: "v1".into(),
        })
        .await?
        .into_inner();
    t.name = format!("{} {}", v.runtime_name, v.runtime_version);
    if !handler.is_empty() {
        t.name = format!("{} ({handler})", t.name);
    }
    Ok(t)
}

/// The machine's load averages.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        let d: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        let s = summarize(&d);
        assert_eq!(s.n, 100);
        assert!((s.p50_ms - 51.0).abs() < 1.01, "{}", s.p50_ms);
        assert!((s.p90_ms - 90.0).abs() < 1.01);
        assert!((s.p99_ms - 99.0).abs() < 1.01);
        assert_eq!(summarize(&[]).p50_ms, 0.0);
    }
}
