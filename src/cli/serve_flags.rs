//! The flags of `husk serve` (and of `husk check` and `husk config dump`,
//! which read the host as the server would), and the config they make:
//! the config file, its drop-ins (`config/layers.rs`), then each flag.

use crate::config::layers::Layered;
use crate::config::{Config, ConfigError, DEFAULT_CONFIG_PATH};
use std::path::PathBuf;

#[derive(clap::Args, Debug, Default, Clone)]
pub struct ServeFlags {
    /// Config file; flags override it [default: /etc/husk/config.toml; a
    /// missing default file means built-in defaults].
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Persistent state directory [default: /var/lib/husk].
    #[arg(long)]
    pub root: Option<PathBuf>,
    /// Volatile state directory [default: /run/husk].
    #[arg(long)]
    pub state: Option<PathBuf>,
    /// The CRI unix socket [default: /run/husk/husk.sock].
    #[arg(long)]
    pub listen: Option<PathBuf>,
    /// hosts.toml directory, containerd's certs.d layout [default: /etc/husk/certs.d].
    #[arg(long)]
    pub registry_config_dir: Option<PathBuf>,
    /// CNI network config directory [default: /etc/cni/net.d].
    #[arg(long)]
    pub cni_conf_dir: Option<PathBuf>,
    /// CNI plugin directories, colon-separated [default: /opt/cni/bin:/usr/lib/cni].
    #[arg(long)]
    pub cni_bin_dir: Option<String>,
    /// CDI spec directories, colon-separated, lowest priority first
    /// [default: /etc/cdi:/var/run/cdi].
    #[arg(long)]
    pub cdi_spec_dirs: Option<String>,
    /// Seconds a blob download may make no progress [default: 60].
    #[arg(long)]
    pub registry_stall_timeout: Option<u64>,
    /// Seconds a CNI plugin may run before it is killed [default: 60].
    #[arg(long)]
    pub cni_plugin_timeout: Option<u64>,
    /// The pause image [default: registry.k8s.io/pause:3.10].
    #[arg(long)]
    pub sandbox_image: Option<String>,
    /// node|pod: where a pod's mounts live, the node's mount namespace or
    /// its monitor's own [default: pod].
    #[arg(long)]
    pub mount_namespace: Option<String>,
    /// auto|systemd|cgroupfs: who makes pod cgroups; must match the
    /// kubelet's cgroupDriver [default: auto].
    #[arg(long)]
    pub cgroup_driver: Option<String>,
    /// trace|debug|info|warn|error [default: info]
    #[arg(long)]
    pub log_level: Option<String>,
    /// text|json [default: text]
    #[arg(long)]
    pub log_format: Option<String>,
    /// Streaming server ip:port, port 0 for a random one [default: 127.0.0.1:0].
    #[arg(long)]
    pub streaming_address: Option<String>,
    /// Seconds a streaming URL stays valid [default: 60].
    #[arg(long)]
    pub streaming_token_ttl: Option<u64>,
    /// Prometheus metrics at /metrics: ip:port or unix:///path [default: none].
    #[arg(long)]
    pub metrics_address: Option<String>,
    /// The socket NRI plugins dial [default: /var/run/nri/nri.sock].
    #[arg(long)]
    pub nri_socket: Option<PathBuf>,
    /// Pre-installed NRI plugins [default: /opt/nri/plugins].
    #[arg(long)]
    pub nri_plugin_path: Option<PathBuf>,
    /// Their configs [default: /etc/nri/conf.d].
    #[arg(long)]
    pub nri_plugin_config_path: Option<PathBuf>,
}

/// Config file + flags, validated; errors are one line, exit code 2.
pub fn load_config(f: &ServeFlags) -> Result<Config, ConfigError> {
    load_layered(f).map(|l| l.config)
}

/// The config file, its drop-ins and the flags, with where each value
/// came from.
pub fn load_layered(f: &ServeFlags) -> Result<Layered, ConfigError> {
    let (path, explicit) = match &f.config {
        Some(p) => (p.clone(), true),
        None => (PathBuf::from(DEFAULT_CONFIG_PATH), false),
    };
    let mut l = crate::config::layers::load(&path, explicit)?;
    let c = &mut l.config;
    let mut set = Vec::new();
    if let Some(v) = &f.root {
        c.root = v.clone();
        set.push(("root", "--root"));
    }
    if let Some(v) = &f.state {
        c.state = v.clone();
        set.push(("state", "--state"));
    }
    if let Some(v) = &f.listen {
        c.listen = v.clone();
        set.push(("listen", "--listen"));
    }
    if let Some(v) = &f.registry_config_dir {
        c.registry.config_dir = v.clone();
        set.push(("registry.config_dir", "--registry-config-dir"));
    }
    if let Some(v) = &f.cni_conf_dir {
        c.cni.conf_dir = v.clone();
        set.push(("cni.conf_dir", "--cni-conf-dir"));
    }
    if let Some(v) = &f.cni_bin_dir {
        c.cni.bin_dirs = v
            .split(':')
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
            .collect();
        set.push(("cni.bin_dirs", "--cni-bin-dir"));
    }
    if let Some(v) = &f.cdi_spec_dirs {
        c.cdi.spec_dirs = v
            .split(':')
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
            .collect();
        set.push(("cdi.spec_dirs", "--cdi-spec-dirs"));
    }
    if let Some(v) = f.registry_stall_timeout {
        c.registry.stall_timeout_secs = v;
        set.push(("registry.stall_timeout_secs", "--registry-stall-timeout"));
    }
    if let Some(v) = f.cni_plugin_timeout {
        c.cni.plugin_timeout_secs = v;
        set.push(("cni.plugin_timeout_secs", "--cni-plugin-timeout"));
    }
    if let Some(v) = &f.sandbox_image {
        c.sandbox_image = v.clone();
        set.push(("sandbox_image", "--sandbox-image"));
    }
    if let Some(v) = &f.mount_namespace {
        c.mount_namespace = v.clone();
        set.push(("mount_namespace", "--mount-namespace"));
    }
    if let Some(v) = &f.cgroup_driver {
        c.cgroup.driver = v.clone();
        set.push(("cgroup.driver", "--cgroup-driver"));
    }
    if let Some(v) = &f.log_level {
        c.log_level = v.clone();
        set.push(("log_level", "--log-level"));
    }
    if let Some(v) = &f.log_format {
        c.log_format = v.clone();
        set.push(("log_format", "--log-format"));
    }
    if let Some(v) = &f.streaming_address {
        c.streaming.address = v.clone();
        set.push(("streaming.address", "--streaming-address"));
    }
    if let Some(v) = f.streaming_token_ttl {
        c.streaming.token_ttl_secs = v;
        set.push(("streaming.token_ttl_secs", "--streaming-token-ttl"));
    }
    if let Some(v) = &f.metrics_address {
        c.metrics.address = v.clone();
        set.push(("metrics.address", "--metrics-address"));
    }
    if let Some(v) = &f.nri_socket {
        c.nri.socket_path = v.clone();
        set.push(("nri.socket_path", "--nri-socket"));
    }
    if let Some(v) = &f.nri_plugin_path {
        c.nri.plugin_path = v.clone();
        set.push(("nri.plugin_path", "--nri-plugin-path"));
    }
    if let Some(v) = &f.nri_plugin_config_path {
        c.nri.plugin_config_path = v.clone();
        set.push(("nri.plugin_config_path", "--nri-plugin-config-path"));
    }
    for (key, flag) in set {
        l.flag(key, flag);
    }
    l.config.validate()?;
    Ok(l)
}
