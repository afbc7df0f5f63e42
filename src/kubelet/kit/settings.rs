//! The kubelet's settings (flags of `husk kubelet` / `husk run`), with
//! the real kubelet's defaults.

use super::node_config::{meminfo_bytes, Eviction, ImageGc, Reservation};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Settings {
    pub runtime_endpoint: String,
    /// Manifest file or directory (`--pod-manifest-path`).
    pub manifests: Option<PathBuf>,
    /// Manifest URL (`--manifest-url`).
    pub manifest_url: Option<String>,
    /// Where each pod's status is written as JSON (`<ns>_<name>.json`).
    pub status_dir: Option<PathBuf>,
    /// Pod directories (emptyDir volumes, termination-message files, hosts files).
    pub root: PathBuf,
    /// Container log directories: `<pod_log_root>/<ns>_<name>_<uid>/`.
    pub pod_log_root: PathBuf,
    pub node_name: String,
    /// Parent of the per-pod cgroups (`<root>/<qos>/pod<uid>`); empty: none.
    pub cgroup_root: String,
    /// Who makes the pod and QoS cgroups: the kubelet on cgroupfs, or
    /// systemd (slices) on the systemd driver (`--cgroup-driver`).
    pub systemd_cgroups: bool,
    /// pids.max of each pod's cgroup (`--pod-max-pids`); None: no limit.
    pub pod_max_pids: Option<i64>,
    pub cluster_dns: Vec<String>,
    pub cluster_domain: String,
    /// The host resolver config for dnsPolicy Default.
    pub resolv_conf: PathBuf,
    pub crash_backoff_initial: Duration,
    pub crash_backoff_max: Duration,
    pub image_backoff_initial: Duration,
    pub image_backoff_max: Duration,
    /// PLEG relist period.
    pub relist_period: Duration,
    /// Periodic resync of every pod.
    pub sync_frequency: Duration,
    pub file_check_frequency: Duration,
    pub http_check_frequency: Duration,
    /// How soon a pod whose sync failed is retried.
    pub error_requeue: Duration,
    /// Node memory, for Burstable containers' OOM score.
    pub memory_capacity: i64,
    /// The API server to join (`--kubeconfig`); None: static pods only.
    pub kubeconfig: Option<PathBuf>,
    /// The node's InternalIP (`--node-ip`); None: the address that reaches
    /// the API server, found at start.
    pub node_ip: Option<String>,
    /// The kubelet API's address and port (`--address`, `--port`).
    pub address: String,
    pub port: u16,
    /// The kubelet API's serving certificate and key (PEM); None: a
    /// self-signed pair made at start.
    pub tls_cert_file: Option<PathBuf>,
    pub tls_private_key_file: Option<PathBuf>,
    /// Client certificates of the kubelet API are checked against these CAs.
    pub client_ca_file: Option<PathBuf>,
    /// `pods` capacity of the node.
    pub max_pods: i64,
    /// How often node status is computed (and patched when changed).
    pub node_status_update_frequency: Duration,
    /// Unchanged node status is still patched this often.
    pub node_status_report_frequency: Duration,
    /// The node Lease's duration; it is renewed every quarter of it.
    pub node_lease_duration_secs: i32,
    /// Resources kept back from pods for the kubelet and the runtime
    /// (`--kube-reserved`) and for the rest of the system (`--system-reserved`).
    pub kube_reserved: Reservation,
    pub system_reserved: Reservation,
    /// What node allocatable is enforced on: `pods` bounds the pods' cgroup;
    /// `kube-reserved` / `system-reserved` bound these cgroups.
    pub enforce_node_allocatable: Vec<String>,
    pub kube_reserved_cgroup: Option<String>,
    pub system_reserved_cgroup: Option<String>,
    pub eviction: Eviction,
    pub image_gc: ImageGc,
    /// TLS bootstrap: the credential that asks for the client certificate
    /// when `kubeconfig` is missing or expired (`--bootstrap-kubeconfig`).
    pub bootstrap_kubeconfig: Option<PathBuf>,
    /// Where client certificates are kept (`--cert-dir`).
    pub cert_dir: PathBuf,
    /// Rotate the client certificate before it expires (`--rotate-certificates`).
    pub rotate_certificates: bool,
    /// Ask the cluster for the kubelet API's certificate and rotate it
    /// (`--rotate-server-certificates`).
    pub rotate_server_certificates: bool,
}

impl Settings {
    /// The kubelet's defaults for everything but the endpoint.
    pub fn new(runtime_endpoint: &str) -> Settings {
        Settings {
            runtime_endpoint: runtime_endpoint.to_string(),
            manifests: None,
            manifest_url: None,
            status_dir: None,
            root: PathBuf::from("/var/lib/husk-kubelet"),
            pod_log_root: PathBuf::from("/var/log/pods"),
            node_name: default_node_name(),
            cgroup_root: "/kubepods".into(),
            systemd_cgroups: false,
            pod_max_pids: None,
            cluster_dns: Vec::new(),
            cluster_domain: "cluster.local".into(),
            resolv_conf: PathBuf::from("/etc/resolv.conf"),
            crash_backoff_initial: Duration::from_secs(10),
            crash_backoff_max: Duration::from_secs(300),
            image_backoff_initial: Duration::from_secs(10),
            image_backoff_max: Duration::from_secs(300),
            relist_period: Duration::from_secs(1),
            sync_frequency: Duration::from_secs(60),
            file_check_frequency: Duration::from_secs(20),
            http_check_frequency: Duration::from_secs(20),
            error_requeue: Duration::from_secs(10),
            memory_capacity: memory_capacity(),
            kubeconfig: None,
            node_ip: None,
            address: "0.0.0.0".into(),
            port: 10250,
            tls_cert_file: None,
            tls_private_key_file: None,
            client_ca_file: None,
            max_pods: 110,
            node_status_update_frequency: Duration::from_secs(10),
            node_status_report_frequency: Duration::from_secs(60),
            node_lease_duration_secs: 40,
            kube_reserved: Reservation::default(),
            system_reserved: Reservation::default(),
            enforce_node_allocatable: vec!["pods".into()],
            kube_reserved_cgroup: None,
            system_reserved_cgroup: None,
            eviction: Eviction::default(),
            image_gc: ImageGc::default(),
            bootstrap_kubeconfig: None,
            cert_dir: PathBuf::from("/var/lib/husk-kubelet/pki"),
            rotate_certificates: false,
            rotate_server_certificates: false,
        }
    }
}

/// The host name, lowercased (the kubelet's default node name).
pub fn default_node_name() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .to_lowercase()
}

fn memory_capacity() -> i64 {
    meminfo_bytes(
        &std::fs::read_to_string("/proc/meminfo").unwrap_or_default(),
        "MemTotal:",
    )
}
