//! The API-server side of `husk kubelet` (`--kubeconfig`): the node joins
//! a cluster, as the kubelet does.
//!
//! ```text
//!              ┌── node: register the Node, Lease every 10 s, node status
//! API server ◀─┼── pods: list-watch spec.nodeName=NODE ─snapshots─▶ PodConfig ("api")
//!              ├── status_sync: pod status patches (batched, on change),
//!              │   mirror pods of static pods, delete after termination
//!              └── events: the pod lifecycle events, aggregated
//! ```
//!
//! Every task keeps going through API errors (the node keeps running what
//! it has), retrying with back-off and logging one line per cause, and one
//! when it recovers. Client: kube-rs (`kube`, its runtime watcher) on the
//! k8s-openapi types the rest of the kubelet uses.

pub mod client;
pub mod events;
pub mod node;
pub mod pods;
pub mod status_sync;

pub use crate::kubelet::kit::api_error::{code, describe};
use crate::kubelet::kit::recorder::Record;
use crate::kubelet::kit::runtime::Cri;
use crate::kubelet::kit::settings::Settings;
use crate::kubelet::managers::certificates::store::Identity;
use crate::kubelet::pods::sources::SourceSnapshot;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

/// Starts the node, pod source, status and event tasks.
pub fn start(
    client: kube::Client,
    settings: &Settings,
    cri: Cri,
    managers: node::Managers,
    snapshots: mpsc::Sender<SourceSnapshot>,
    statuses: mpsc::UnboundedReceiver<status_sync::Msg>,
    events: mpsc::UnboundedReceiver<Record>,
) -> Vec<JoinHandle<()>> {
    let (uid_tx, uid_rx) = watch::channel(None);
    let mirrors = pods::Mirrors::default();
    let node = settings.node_name.clone();
    let node_ip = settings
        .node_ip
        .clone()
        .unwrap_or_else(|| "127.0.0.1".into());
    vec![
        tokio::spawn(node::run(
            client.clone(),
            settings.clone(),
            node_ip,
            cri,
            managers,
            uid_tx,
        )),
        tokio::spawn(pods::run(
            client.clone(),
            node.clone(),
            snapshots,
            mirrors.clone(),
        )),
        tokio::spawn(status_sync::run(
            client.clone(),
            node.clone(),
            statuses,
            mirrors,
            uid_rx,
        )),
        tokio::spawn(events::run(client, node, events)),
    ]
}

/// A client for the cluster in a kubeconfig (its current context); with
/// `rotating`, one whose client certificate the certificate manager can
/// swap (its identity is returned).
pub async fn connect(
    kubeconfig: &Path,
    rotating: bool,
) -> anyhow::Result<(kube::Client, http::Uri, Option<Arc<Identity>>)> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)
        .map_err(|e| anyhow::anyhow!("kubeconfig {}: {e}", kubeconfig.display()))?;
    let mut cfg =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| anyhow::anyhow!("kubeconfig {}: {e}", kubeconfig.display()))?;
    cfg.connect_timeout = Some(Duration::from_secs(10));
    // Watches are long polls: the server ends them (timeoutSeconds < this).
    cfg.read_timeout = Some(Duration::from_secs(330));
    cfg.write_timeout = Some(Duration::from_secs(30));
    // The client's own retry (15 tries, backing off up to minutes) would
    // hold a failing call far past a heartbeat: every task here retries
    // on its own schedule instead.
    cfg.default_retry = false;
    let url = cfg.cluster_url.clone();
    if rotating {
        let (client, identity) = client::rotating(cfg, kubeconfig)?;
        return Ok((client, url, Some(identity)));
    }
    let client = kube::Client::try_from(cfg)
        .map_err(|e| anyhow::anyhow!("kubeconfig {}: {e}", kubeconfig.display()))?;
    Ok((client, url, None))
}

/// The address this host reaches `url`'s host from (no packet is sent:
/// a UDP socket is only connected): the node's default InternalIP.
pub fn local_ip_towards(url: &http::Uri) -> Option<String> {
    let host = url.host()?.trim_start_matches('[').trim_end_matches(']');
    let port = url.port_u16().unwrap_or(443);
    let target = std::net::ToSocketAddrs::to_socket_addrs(&(host, port))
        .ok()?
        .next()?;
    let bind = if target.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    };
    let s = std::net::UdpSocket::bind(bind).ok()?;
    s.connect(target).ok()?;
    Some(s.local_addr().ok()?.ip().to_string())
}

/// Logs a task's failures once per distinct cause, and its recovery.
pub struct Reporter {
    what: &'static str,
    last: Option<String>,
}

impl Reporter {
    pub fn new(what: &'static str) -> Reporter {
        Reporter { what, last: None }
    }

    /// A failure: logged when its cause differs from the previous one.
    pub fn failed(&mut self, e: &dyn std::fmt::Display) {
        let msg = e.to_string();
        if self.last.as_deref() != Some(msg.as_str()) {
            tracing::warn!(task = self.what, error = %msg, "API server call failed; retrying");
            self.last = Some(msg);
        }
    }

    /// A success: logged once after failures.
    pub fn ok(&mut self) {
        if self.last.take().is_some() {
            tracing::info!(task = self.what, "API server reachable again");
        }
    }
}

/// Exponential back-off for retries: 500 ms doubling to 30 s.
pub struct Retry(Duration);

impl Default for Retry {
    fn default() -> Retry {
        Retry(Duration::from_millis(500))
    }
}

impl Retry {
    pub fn delay(&mut self) -> Duration {
        let d = self.0;
        self.0 = (self.0 * 2).min(Duration::from_secs(30));
        d
    }
    pub fn reset(&mut self) {
        *self = Retry::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reporter_logs_each_cause_once() {
        let mut r = Reporter::new("t");
        assert_eq!(r.last, None);
        r.failed(&"down");
        assert_eq!(r.last.as_deref(), Some("down"));
        r.failed(&"down");
        assert_eq!(r.last.as_deref(), Some("down"));
        r.ok();
        assert_eq!(r.last, None);
    }

    #[test]
    fn retry_doubles_to_a_cap() {
        let mut r = Retry::default();
        assert_eq!(r.delay(), Duration::from_millis(500));
        assert_eq!(r.delay(), Duration::from_secs(1));
        for _ in 0..10 {
            r.delay();
        }
        assert_eq!(r.delay(), Duration::from_secs(30));
        r.reset();
        assert_eq!(r.delay(), Duration::from_millis(500));
    }
}
