//! `husk kubelet`: runs the kubelet loop and prints pod status changes as
//! a live table (like `kubectl get pods -A -w`); manifest errors go to
//! stderr. Shared with `husk run`: flag parsing into [`Settings`] and the
//! row formatting.

pub use crate::kubelet::kit::node_config::parse_duration;
use crate::kubelet::kit::settings::Settings;
use crate::kubelet::managers::status_manager::StatusEvent;
use crate::kubelet::{self, Control, Notice};
use std::path::PathBuf;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// Flags shared by `husk kubelet` and `husk run`.
#[derive(clap::Args, Debug, Clone)]
pub struct CommonFlags {
    /// The CRI runtime to drive (husk serve, containerd, …).
    #[arg(long, env = "CONTAINER_RUNTIME_ENDPOINT", default_value = super::DEFAULT_ENDPOINT)]
    pub runtime_endpoint: String,
    /// Pod directories: emptyDir volumes, termination-message files, hosts files.
    #[arg(long, default_value = "/var/lib/husk-kubelet")]
    pub root: PathBuf,
    /// Container logs go to <pod-log-root>/<namespace>_<name>_<uid>/.
    #[arg(long, default_value = "/var/log/pods")]
    pub pod_log_root: PathBuf,
    /// The node name (default: the host name).
    #[arg(long)]
    pub node_name: Option<String>,
    /// Parent cgroup of the pods (<root>/<qos>/pod<uid>); "" for none.
    #[arg(long, default_value = "/kubepods")]
    pub cgroup_root: String,
    /// Who makes the pod cgroups: cgroupfs (this kubelet writes them) or
    /// systemd (slice units); it must match the runtime's driver.
    #[arg(long, default_value = "cgroupfs", value_parser = ["cgroupfs", "systemd"])]
    pub cgroup_driver: String,
    /// Cluster DNS servers for dnsPolicy ClusterFirst (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub cluster_dns: Vec<String>,
    #[arg(long, default_value = "cluster.local")]
    pub cluster_domain: String,
    /// The resolver config for dnsPolicy Default.
    #[arg(long, default_value = "/etc/resolv.conf")]
    pub resolv_conf: PathBuf,
    /// Write each pod's status (the whole Pod as JSON) here.
    #[arg(long)]
    pub status_dir: Option<PathBuf>,
    /// trace|debug|info|warn|error (logs go to stderr).
    #[arg(long, default_value = "warn")]
    pub log_level: String,
    /// First crash-loop back-off (the kubelet's is 10s).
    #[arg(long, hide = true, value_parser = parse_duration, default_value = "10s")]
    pub crash_backoff_initial: Duration,
    /// Crash-loop back-off cap (the kubelet's is 5m).
    #[arg(long, hide = true, value_parser = parse_duration, default_value = "5m")]
    pub crash_backoff_max: Duration,
    #[arg(long, hide = true, value_parser = parse_duration, default_value = "10s")]
    pub image_backoff_initial: Duration,
    #[arg(long, hide = true, value_parser = parse_duration, default_value = "5m")]
    pub image_backoff_max: Duration,
    #[arg(long, hide = true, value_parser = parse_duration, default_value = "1s")]
    pub relist_period: Duration,
    #[arg(long, hide = true, value_parser = parse_duration, default_value = "1m")]
    pub sync_frequency: Duration,
    #[arg(long, hide = true, value_parser = parse_duration, default_value = "20s")]
    pub file_check_frequency: Duration,
    #[arg(long, hide = true, value_parser = parse_duration, default_value = "20s")]
    pub http_check_frequency: Duration,
    #[command(flatten)]
    pub node: super::node_flags::NodeFlags,
}

/// Flags of `husk kubelet` that join a cluster.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ClusterFlags {
    /// Join the cluster of this kubeconfig (its current context): register
    /// the node, run the pods bound to it, report their status.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The node's InternalIP (default: the address that reaches the API server).
    #[arg(long)]
    pub node_ip: Option<String>,
    /// The kubelet API's address.
    #[arg(long, default_value = "0.0.0.0")]
    pub address: String,
    /// The kubelet API's port (reported as the node's kubelet endpoint).
    #[arg(long, default_value_t = 10250)]
    pub port: u16,
    /// The kubelet API's serving certificate (PEM; default: self-signed).
    #[arg(long, requires = "tls_private_key_file")]
    pub tls_cert_file: Option<PathBuf>,
    #[arg(long, requires = "tls_cert_file")]
    pub tls_private_key_file: Option<PathBuf>,
    /// Kubelet API clients must present a certificate signed by these CAs.
    #[arg(long)]
    pub client_ca_file: Option<PathBuf>,
    /// The node's `pods` capacity.
    #[arg(long, default_value_t = 110)]
    pub max_pods: i64,
    #[arg(long, hide = true, value_parser = parse_duration, default_value = "10s")]
    pub node_status_update_frequency: Duration,
    /// TLS bootstrap: when --kubeconfig is missing or its certificate has
    /// expired, ask for a client certificate with this credential and write
    /// --kubeconfig to use it.
    #[arg(long, requires = "kubeconfig")]
    pub bootstrap_kubeconfig: Option<PathBuf>,
    /// Where client certificates are kept (default: <root>/pki).
    #[arg(long)]
    pub cert_dir: Option<PathBuf>,
    /// Rotate the client certificate before it expires.
    #[arg(long)]
    pub rotate_certificates: bool,
    /// Ask the cluster for the kubelet API's serving certificate (signer
    /// kubernetes.io/kubelet-serving; someone must approve it) and rotate it.
    #[arg(long)]
    pub rotate_server_certificates: bool,
}

impl ClusterFlags {
    pub fn apply(&self, s: &mut Settings) {
        s.kubeconfig = self.kubeconfig.clone();
        s.node_ip = self.node_ip.clone();
        s.address = self.address.clone();
        s.port = self.port;
        s.tls_cert_file = self.tls_cert_file.clone();
        s.tls_private_key_file = self.tls_private_key_file.clone();
        s.client_ca_file = self.client_ca_file.clone();
        s.max_pods = self.max_pods;
        s.node_status_update_frequency = self.node_status_update_frequency;
        s.bootstrap_kubeconfig = self.bootstrap_kubeconfig.clone();
        s.cert_dir = self.cert_dir.clone().unwrap_or_else(|| s.root.join("pki"));
        s.rotate_certificates = self.rotate_certificates;
        s.rotate_server_certificates = self.rotate_server_certificates;
    }
}

impl CommonFlags {
    /// The settings; an error names the flag whose value is refused.
    pub fn settings(&self) -> anyhow::Result<Settings> {
        let mut s = Settings::new(&self.runtime_endpoint);
        s.root = self.root.clone();
        s.pod_log_root = self.pod_log_root.clone();
        if let Some(n) = &self.node_name {
            s.node_name = n.to_lowercase();
        }
        s.cgroup_root = self.cgroup_root.clone();
        s.systemd_cgroups = self.cgroup_driver == "systemd";
        s.cluster_dns = self
            .cluster_dns
            .iter()
            .filter(|d| !d.is_empty())
            .cloned()
            .collect();
        s.cluster_domain = self.cluster_domain.clone();
        s.resolv_conf = self.resolv_conf.clone();
        s.status_dir = self.status_dir.clone();
        s.crash_backoff_initial = self.crash_backoff_initial;
        s.crash_backoff_max = self.crash_backoff_max;
        s.image_backoff_initial = self.image_backoff_initial;
        s.image_backoff_max = self.image_backoff_max;
        s.relist_period = self.relist_period.max(Duration::from_millis(100));
        s.sync_frequency = self.sync_frequency;
        s.file_check_frequency = self.file_check_frequency;
        s.http_check_frequency = self.http_check_frequency;
        s.error_requeue = self.crash_backoff_initial.min(Duration::from_secs(10));
        self.node.apply(&mut s).map_err(|e| anyhow::anyhow!(e))?;
        Ok(s)
    }
}

/// Age as kubectl prints it: 5s, 3m10s, 2h5m, 4d.
pub fn age(secs: i64) -> String {
    let s = secs.max(0);
    match s {
        0..=119 => format!("{s}s"),
        120..=599 => format!("{}m{}s", s / 60, s % 60),
        600..=10799 => format!("{}m", s / 60),
        10800..=172799 => format!("{}h{}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d", s / 86400),
    }
}

/// Seconds since the pod was first seen.
pub fn pod_age(ev: &StatusEvent) -> i64 {
    let now = crate::kubelet::kit::defaults::now().0.as_second();
    let start = ev
        .pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map(|t| t.0.as_second())
        .unwrap_or(now);
    now - start
}

pub const HEADER: &str = "NAMESPACE    NAME                                READY   STATUS                       RESTARTS   AGE";

pub fn format_row(ev: &StatusEvent) -> String {
    let r = &ev.row;
    let status = if ev.removed {
        "Removed".to_string()
    } else {
        r.status.clone()
    };
    format!(
        "{:<12} {:<35} {:<7} {:<28} {:<10} {}",
        r.namespace,
        r.name,
        r.ready,
        status,
        r.restarts,
        age(pod_age(ev))
    )
}

/// `husk kubelet`.
pub async fn run(
    flags: CommonFlags,
    cluster: ClusterFlags,
    manifests: Option<PathBuf>,
    manifest_url: Option<String>,
) -> anyhow::Result<()> {
    if manifests.is_none() && manifest_url.is_none() && cluster.kubeconfig.is_none() {
        anyhow::bail!(
            "nothing to run: give --kubeconfig FILE, --manifests DIR and/or --manifest-url URL"
        );
    }
    let mut settings = flags.settings()?;
    cluster.apply(&mut settings);
    settings.manifests = manifests;
    settings.manifest_url = manifest_url;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (_snap_tx, snap_rx) = mpsc::channel(1);
    let (stop_tx, stop_rx) = watch::channel(false);
    let control = Control {
        snapshots: snap_rx,
        sources: Vec::new(),
        stop: stop_rx,
    };
    let printer = tokio::spawn(async move {
        let mut header = false;
        while let Some(n) = rx.recv().await {
            match n {
                Notice::Runtime(name, version) => {
                    eprintln!("husk kubelet: runtime {name} {version}")
                }
                Notice::ManifestError(e) => eprintln!("error: {}: {}", e.origin, e.message),
                Notice::Status(ev) => {
                    if !header {
                        println!("{HEADER}");
                        header = true;
                    }
                    println!("{}", format_row(&ev));
                }
            }
        }
    });
    let mut loop_task = tokio::spawn(kubelet::run(settings, tx, control));
    let sigterm = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        r = &mut loop_task => { r??; }
        _ = tokio::signal::ctrl_c() => { let _ = stop_tx.send(true); }
        _ = sigterm => { let _ = stop_tx.send(true); }
    }
    // Pods keep running in the runtime; a restarted kubelet adopts them.
    let _ = tokio::time::timeout(Duration::from_secs(5), loop_task).await;
    let _ = tokio::time::timeout(Duration::from_millis(200), printer).await;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_ages() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert!(parse_duration("10x").is_err());
        assert_eq!(age(5), "5s");
        assert_eq!(age(190), "3m10s");
        assert_eq!(age(7200), "120m");
        assert_eq!(age(86400 * 3), "3d");
    }
}
