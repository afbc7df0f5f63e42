//! The actions probes and lifecycle hooks run: exec in the container
//! (ExecSync), HTTP GET to the pod, TCP connect to the pod, sleep.
//!
//! HTTP and TCP go to the pod's IP (127.0.0.1 for host-network pods) unless
//! the action names a host; a named port is looked up among the
//! container's ports. HTTP success is a status in 200..400, as the kubelet
//! judges it; redirects are followed.

use crate::kubelet::kit::runtime::Cri;
use k8s_openapi::api::core::v1::{Container, HTTPGetAction, TCPSocketAction};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::time::Duration;

/// The result of one action.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Success,
    Failure(String),
}

/// Resolves an int-or-name port against the container's ports.
pub fn port(p: &IntOrString, c: &Container) -> Result<u16, String> {
    match p {
        IntOrString::Int(n) if (1..=65535).contains(n) => Ok(*n as u16),
        IntOrString::Int(n) => Err(format!("invalid port {n}")),
        IntOrString::String(s) => {
            if let Ok(n) = s.parse::<i32>() {
                return port(&IntOrString::Int(n), c);
            }
            c.ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(s.as_str()))
                .map(|p| p.container_port as u16)
                .ok_or_else(|| format!("container has no port named {s:?}"))
        }
    }
}

pub async fn exec(cri: &Cri, container_id: &str, cmd: Vec<String>, timeout: Duration) -> Outcome {
    match cri.exec_sync(container_id, cmd.clone(), timeout).await {
        Ok(r) if r.exit_code == 0 => Outcome::Success,
        Ok(r) => {
            let mut out = String::from_utf8_lossy(&r.stdout).to_string();
            out.push_str(&String::from_utf8_lossy(&r.stderr));
            let out = out.trim();
            Outcome::Failure(if out.is_empty() {
                format!("command {cmd:?} exited with {}", r.exit_code)
            } else {
                format!(
                    "command {cmd:?} exited with {}: {}",
                    r.exit_code,
                    truncate(out, 1024)
                )
            })
        }
        Err(e) if e.code() == tonic::Code::DeadlineExceeded => Outcome::Failure(format!(
            "command {cmd:?} timed out after {}s",
            timeout.as_secs()
        )),
        Err(e) => Outcome::Failure(e.to_string()),
    }
}

fn truncate(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

pub async fn http_get(
    a: &HTTPGetAction,
    pod_ip: &str,
    c: &Container,
    timeout: Duration,
) -> Outcome {
    let port = match port(&a.port, c) {
        Ok(p) => p,
        Err(e) => return Outcome::Failure(e),
    };
    let host = a
        .host
        .clone()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| pod_ip.to_string());
    let scheme = a.scheme.as_deref().unwrap_or("HTTP").to_lowercase();
    let host_part = if host.contains(':') {
        format!("[{host}]")
    } else {
        host
    };
    let mut path = a.path.clone().unwrap_or_else(|| "/".into());
    if !path.starts_with('/') {
        path.insert(0, '/');
    }
    let url = format!("{scheme}://{host_part}:{port}{path}");
    let client = match reqwest::Client::builder()
        .timeout(timeout)
        .danger_accept_invalid_certs(true)
        .redirect(reqwest::redirect::Policy::limited(10))
        .no_proxy()
        .build()
    {
        Ok(c) => c,
        Err(e) => return Outcome::Failure(format!("HTTP client: {e}")),
    };
    let mut req = client.get(&url).header("User-Agent", "kube-probe/husk");
    for h in a.http_headers.iter().flatten() {
        req = req.header(h.name.as_str(), h.value.as_str());
    }
    match req.send().await {
        Ok(r) if (200..400).contains(&r.status().as_u16()) => Outcome::Success,
        Ok(r) => Outcome::Failure(format!(
            "HTTP probe failed with statuscode: {}",
            r.status().as_u16()
        )),
        Err(e) if e.is_timeout() => {
            Outcome::Failure(format!("Get {url:?}: context deadline exceeded"))
        }
        Err(e) => Outcome::Failure(format!("Get {url:?}: {e}")),
    }
}

pub async fn tcp(a: &TCPSocketAction, pod_ip: &str, c: &Container, timeout: Duration) -> Outcome {
    let port = match port(&a.port, c) {
        Ok(p) => p,
        Err(e) => return Outcome::Failure(e),
    };
    let host = a
        .host
        .clone()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| pod_ip.to_string());
    match tokio::time::timeout(
        timeout,
        tokio::net::TcpStream::connect((host.as_str(), port)),
    )
    .await
    {
        Ok(Ok(_)) => Outcome::Success,
        Ok(Err(e)) => Outcome::Failure(format!("dial tcp {host}:{port}: {e}")),
        Err(_) => Outcome::Failure(format!("dial tcp {host}:{port}: i/o timeout")),
    }
}

/// Runs a lifecycle handler (postStart / preStop) within `timeout`.
pub async fn lifecycle(
    cri: &Cri,
    h: &k8s_openapi::api::core::v1::LifecycleHandler,
    container_id: &str,
    pod_ip: &str,
    c: &Container,
    timeout: Duration,
) -> Outcome {
    if let Some(e) = &h.exec {
        exec(
            cri,
            container_id,
            e.command.clone().unwrap_or_default(),
            timeout,
        )
        .await
    } else if let Some(a) = &h.http_get {
        http_get(a, pod_ip, c, timeout).await
    } else if let Some(s) = &h.sleep {
        tokio::time::sleep(Duration::from_secs(s.seconds.max(0) as u64).min(timeout)).await;
        Outcome::Success
    } else {
        Outcome::Failure("no handler".into())
    }
}
