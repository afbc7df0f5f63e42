//! The container benchmark: create+start, stop+remove, a full pod
//! (sandbox + one started container), K pods started in parallel, and the
//! runtime's memory with K pods running.

use super::sandbox::{pod_config, IDLE};
use super::{summarize, turns, Summary, Target};
use crate::api::cri::*;
use serde::Serialize;
use std::time::Instant;

#[derive(Debug, Serialize)]
pub struct ContainerResult {
    pub runtime: String,
    pub create_start: Summary,
    pub stop_remove: Summary,
    pub full_pod: Summary,
    pub parallel_pods: usize,
    pub parallel_wall_ms: f64,
    /// Server plus monitors with `parallel_pods` pods running.
    pub total_rss_mb: f64,
    pub per_pod_mb: f64,
    /// The server alone before those pods (after the lifecycles above).
    pub idle_rss_mb: f64,
    pub idle_pss_mb: f64,
    /// Server plus monitors, proportional (shared pages split), and per pod.
    pub total_pss_mb: f64,
    pub per_pod_pss_mb: f64,
}

pub(super) fn container(image: &str) -> ContainerConfig {
    ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: "app".into(),
            attempt: 0,
        }),
        image: Some(ImageSpec {
            image: image.into(),
            // As the kubelet sends it (CRI-O 1.36 refuses a create
            // without it: it names the image signatures are checked for).
            user_specified_image: image.into(),
            ..Default::default()
        }),
        command: vec!["/bin/sleep".into(), "3600".into()],
        log_path: "app/0.log".into(),
        linux: Some(LinuxContainerConfig {
            security_context: Some(LinuxContainerSecurityContext {
                namespace_options: Some(NamespaceOption {
                    pid: NamespaceMode::Container as i32,
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
    pub(super) async fn start_app(
        &mut self,
        sandbox: &str,
        sc: &PodSandboxConfig,
        image: &str,
    ) -> anyhow::Result<String> {
        let id = self
            .runtime
            .create_container(CreateContainerRequest {
                pod_sandbox_id: sandbox.into(),
                config: Some(container(image)),
                sandbox_config: Some(sc.clone()),
            })
            .await?
            .into_inner()
            .container_id;
        self.runtime
            .start_container(StartContainerRequest {
                container_id: id.clone(),
            })
            .await?;
        Ok(id)
    }
}

/// Interleaved container lifecycles, then `parallel` pods at once.
pub async fn bench_containers(
    targets: &mut [Target],
    image: &str,
    iterations: usize,
    parallel: usize,
) -> anyhow::Result<Vec<ContainerResult>> {
    let n = targets.len();
    let (mut cs, mut sr, mut full) = (
        vec![Vec::new(); n],
        vec![Vec::new(); n],
        vec![Vec::new(); n],
    );
    for t in targets.iter_mut() {
        t.pull_app(image).await?;
    }
    for i in 0..iterations {
        let order = turns(i, n);
        for k in order {
            let t = &mut targets[k];
            let sc = pod_config(&format!("c{k}"), i, &t.cgroup_parent);
            let start = Instant::now();
            let sandbox = t.run_pod(sc.clone()).await?;
            let mid = Instant::now();
            let id = t.start_app(&sandbox, &sc, image).await?;
            let end = Instant::now();
            cs[k].push(end - mid);
            full[k].push(end - start);
            let start = Instant::now();
            t.runtime
                .stop_container(StopContainerRequest {
                    container_id: id.clone(),
                    timeout: 0,
                })
                .await?;
            t.runtime
                .remove_container(RemoveContainerRequest { container_id: id })
                .await?;
            sr[k].push(start.elapsed());
            t.stop_remove(&sandbox).await?;
        }
    }
    let mut out = Vec::new();
    for (k, t) in targets.iter_mut().enumerate() {
        // Idle: no RPC for a few seconds (husk trims itself after 2 s).
        tokio::time::sleep(IDLE).await;
        let idle = t.rss_bytes() as f64;
        let idle_pss = t.pss_bytes() as f64;
        let start = Instant::now();
        let mut tasks = Vec::new();
        for i in 0..parallel {
            let mut tt = Target::connect(&t.name, &t.endpoint).await?;
            // The pods name the handler the run measures.
            tt.handler = t.handler.clone();
            let image = image.to_string();
            tasks.push(tokio::spawn(async move {
                let sc = pod_config(&format!("p{k}"), i, &tt.cgroup_parent);
                let sandbox = tt.run_pod(sc.clone()).await?;
                tt.start_app(&sandbox, &sc, &image).await?;
                anyhow::Ok(sandbox)
            }));
        }
        let mut sandboxes = Vec::new();
        for task in tasks {
            sandboxes.push(task.await??);
        }
        let wall = start.elapsed();
        tokio::time::sleep(IDLE).await;
        let total = t.rss_bytes() as f64;
        let total_pss = t.pss_bytes() as f64;
        for s in sandboxes {
            t.stop_remove(&s).await?;
        }
        out.push(ContainerResult {
            runtime: t.name.clone(),
            create_start: summarize(&cs[k]),
            stop_remove: summarize(&sr[k]),
            full_pod: summarize(&full[k]),
            parallel_pods: parallel,
            parallel_wall_ms: wall.as_secs_f64() * 1e3,
            total_rss_mb: total / 1e6,
            per_pod_mb: (total - idle) / parallel.max(1) as f64 / 1e6,
            idle_rss_mb: idle / 1e6,
            idle_pss_mb: idle_pss / 1e6,
            total_pss_mb: total_pss / 1e6,
            per_pod_pss_mb: (total_pss - idle_pss) / parallel.max(1) as f64 / 1e6,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn containers_name_the_image_the_user_gave() {
        let i = "127.0.0.1:5000/app:1";
        let c = super::container(i);
        let spec = c.image.unwrap_or_default();
        assert_eq!(
            (spec.image.as_str(), spec.user_specified_image.as_str()),
            (i, i)
        );
    }
}
