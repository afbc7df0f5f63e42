//! The streaming benchmark: ExecSync of `true` and streaming exec of
//! `true` (Exec RPC + SPDY session to its exit status), p50 over the
//! iterations, and port-forward throughput (a 64 MiB file from a busybox
//! httpd in the pod through one forwarded connection), for each runtime
//! through husk's own streaming client.

use super::sandbox::pod_config;
use super::{summarize, turns, Summary, Target};
use crate::api::cri::*;
use crate::streaming::client::{self, PortForwarder, Stdio, Tls, Transport};
use serde::Serialize;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const FILE_MB: usize = 64;

#[derive(Debug, Serialize)]
pub struct StreamResult {
    pub runtime: String,
    pub exec_sync: Summary,
    pub exec_stream: Summary,
    pub port_forward_mb_per_s: f64,
}

fn web(image: &str) -> ContainerConfig {
    let script = format!(
        "mkdir -p /tmp/www && head -c {} /dev/zero > /tmp/www/big && exec httpd -f -p 8080 -h /tmp/www",
        FILE_MB << 20
    );
    ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: "web".into(),
            attempt: 0,
        }),
        image: Some(ImageSpec {
            image: image.into(),
            // As the kubelet sends it (CRI-O 1.36 refuses a create
            // without it: it names the image signatures are checked for).
            user_specified_image: image.into(),
            ..Default::default()
        }),
        command: vec!["/bin/sh".into(), "-c".into(), script],
        log_path: "web/0.log".into(),
        linux: Some(LinuxContainerConfig::default()),
        ..Default::default()
    }
}

async fn exec_true(t: &mut Target, id: &str) -> anyhow::Result<()> {
    let url = t
        .runtime
        .exec(ExecRequest {
            container_id: id.into(),
            cmd: vec!["true".into()],
            stdout: true,
            stderr: true,
            ..Default::default()
        })
        .await?
        .into_inner()
        .url;
    let io = Stdio {
        stdout: Some(Box::new(tokio::io::sink())),
        stderr: Some(Box::new(tokio::io::sink())),
        ..Default::default()
    };
    let code = client::remotecommand(&url, Transport::Spdy, &Tls::default(), io).await?;
    anyhow::ensure!(code == 0, "exec of true exited {code}");
    Ok(())
}

/// Bytes of the big file through one forwarded connection, and the time.
async fn pull_file(t: &mut Target, pod: &str) -> anyhow::Result<(usize, Duration)> {
    let url = t
        .runtime
        .port_forward(PortForwardRequest {
            pod_sandbox_id: pod.into(),
            port: vec![8080],
        })
        .await?
        .into_inner()
        .url;
    let pf = PortForwarder::connect(&url, Transport::Spdy, &Tls::default()).await?;
    let (mine, theirs) = tokio::io::duplex(1 << 20);
    let (mut r, mut w) = tokio::io::split(mine);
    let start = Instant::now();
    w.write_all(b"GET /big HTTP/1.0\r\n\r\n").await?;
    let reader = tokio::spawn(async move {
        let mut n = 0usize;
        let mut buf = vec![0u8; 1 << 16];
        while let Ok(k) = r.read(&mut buf).await {
            if k == 0 {
                break;
            }
            n += k;
        }
        n
    });
    pf.forward(8080, theirs).await?;
    drop(w);
    let n = reader.await?;
    let took = start.elapsed();
    pf.close().await;
    Ok((n, took))
}

pub async fn bench_stream(
    targets: &mut [Target],
    image: &str,
    iterations: usize,
) -> anyhow::Result<Vec<StreamResult>> {
    let mut pods = Vec::new();
    for (k, t) in targets.iter_mut().enumerate() {
        t.pull_app(image).await?;
        let sc = pod_config(&format!("s{k}"), 0, &t.cgroup_parent);
        let pod = t.run_pod(sc.clone()).await?;
        let id = t
            .runtime
            .create_container(CreateContainerRequest {
                pod_sandbox_id: pod.clone(),
                config: Some(web(image)),
                sandbox_config: Some(sc),
            })
            .await?
            .into_inner()
            .container_id;
        t.runtime
            .start_container(StartContainerRequest {
                container_id: id.clone(),
            })
            .await?;
        pods.push((pod, id));
    }
    // Let httpd write its file and start listening.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let n = targets.len();
    let (mut sync, mut stream, mut mbs) = (
        vec![Vec::new(); n],
        vec![Vec::new(); n],
        vec![Vec::new(); n],
    );
    for i in 0..iterations {
        let order = turns(i, n);
        for k in order {
            let t = &mut targets[k];
            let id = pods[k].1.clone();
            let start = Instant::now();
            t.runtime
                .exec_sync(ExecSyncRequest {
                    container_id: id.clone(),
                    cmd: vec!["true".into()],
                    timeout: 10,
                })
                .await?;
            sync[k].push(start.elapsed());
            let start = Instant::now();
            exec_true(t, &id).await?;
            stream[k].push(start.elapsed());
        }
    }
    for _ in 0..3 {
        for (k, t) in targets.iter_mut().enumerate() {
            let (bytes, took) = pull_file(t, &pods[k].0).await?;
            anyhow::ensure!(
                bytes > FILE_MB << 20,
                "{}: port-forward moved only {bytes} bytes",
                t.name
            );
            mbs[k].push(bytes as f64 / 1e6 / took.as_secs_f64());
        }
    }
    let mut out = Vec::new();
    for (k, t) in targets.iter_mut().enumerate() {
        t.stop_remove(&pods[k].0).await?;
        let mut m = mbs[k].clone();
        m.sort_by(|a, b| a.total_cmp(b));
        out.push(StreamResult {
            runtime: t.name.clone(),
            exec_sync: summarize(&sync[k]),
            exec_stream: summarize(&stream[k]),
            port_forward_mb_per_s: m[m.len() / 2],
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_web_container_names_the_image_the_user_gave() {
        let i = "127.0.0.1:5000/app:1";
        let spec = super::web(i).image.unwrap_or_default();
        assert_eq!(
            (spec.image.as_str(), spec.user_specified_image.as_str()),
            (i, i)
        );
    }
}
