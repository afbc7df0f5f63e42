//! husk's configuration: a TOML file (default `/etc/husk/config.toml`)
//! overridden by command-line flags.
//!
//! A missing *default* file means the built-in defaults; a missing file named
//! with `--config` is an error. Unknown keys are errors, so a typo never
//! silently falls back to a default. Every problem is reported as one line
//! naming the key, and the CLI exits with code 2.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub mod layers;
pub mod nri;
pub mod runtimes;
pub mod telemetry;
pub use nri::NriConfig;
pub use runtimes::RuntimeConfig;
pub use telemetry::TracingConfig;

/// The default config file location.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/husk/config.toml";

/// A configuration problem: one line naming the key.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Persistent state: content store, snapshots, image and pod records.
    pub root: PathBuf,
    /// Volatile state: sockets, namespace pins, exit files.
    pub state: PathBuf,
    /// The CRI unix socket.
    pub listen: PathBuf,
    /// trace, debug, info, warn or error (or a tracing env-filter directive).
    pub log_level: String,
    /// text or json.
    pub log_format: String,
    /// The pause image that holds each pod's namespaces.
    pub sandbox_image: String,
    /// Where a pod's mounts live: "node" (the node's mount namespace) or
    /// "pod" (its monitor's own, `sandbox::podns`).
    pub mount_namespace: String,
    pub registry: RegistryConfig,
    pub cni: CniConfig,
    pub cgroup: CgroupConfig,
    pub streaming: StreamingConfig,
    pub cdi: CdiConfig,
    pub metrics: MetricsConfig,
    pub tracing: TracingConfig,
    pub nri: NriConfig,
    /// The handler a pod that names none (`""`) runs under.
    pub default_runtime: String,
    /// The runtime handlers by name (`runtimes.rs`).
    #[serde(deserialize_with = "runtimes::merge_defaults")]
    pub runtimes: BTreeMap<String, RuntimeConfig>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// Where Prometheus scrapes `/metrics`: `ip:port` or `unix:///path`;
    /// empty: no endpoint.
    pub address: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CdiConfig {
    /// Where CDI spec files (`*.json`, `*.yaml`) are read, lowest
    /// priority first: a device a later dir defines wins.
    pub spec_dirs: Vec<PathBuf>,
}

impl Default for CdiConfig {
    fn default() -> Self {
        CdiConfig {
            // The CDI spec's own dirs, lowest priority first.
            spec_dirs: vec!["/etc/cdi".into(), "/var/run/cdi".into()],
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct StreamingConfig {
    /// host:port of the exec/attach/port-forward server (port 0: random).
    pub address: String,
    /// PEM certificate and key: serve https (both or neither).
    pub tls_cert: String,
    pub tls_key: String,
    /// Seconds a streaming URL stays valid.
    pub token_ttl_secs: u64,
}

impl Default for StreamingConfig {
    fn default() -> Self {
        StreamingConfig {
            address: "127.0.0.1:0".into(),
            tls_cert: String::new(),
            tls_key: String::new(),
            token_ttl_secs: 60,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RegistryConfig {
    /// Directory of per-host `hosts.toml` files in containerd's format
    /// (`<dir>/<host[:port]>/hosts.toml`, and `<dir>/_default/hosts.toml`).
    pub config_dir: PathBuf,
    /// Layers of one image fetched at once.
    pub max_concurrent_downloads: usize,
    /// Seconds without progress before a blob download is abandoned.
    pub stall_timeout_secs: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CniConfig {
    /// Where network conflists are read (the first in lexical order wins).
    pub conf_dir: PathBuf,
    /// Where plugin binaries are searched, in order.
    pub bin_dirs: Vec<PathBuf>,
    /// Seconds a plugin may run (ADD or DEL) before it is killed.
    pub plugin_timeout_secs: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CgroupConfig {
    /// "auto", "systemd" or "cgroupfs" (`cgroup::Driver`).
    pub driver: String,
    /// The node's block I/O classes (`cgroup::blockio_class`), which an
    /// NRI plugin's adjustment may name; empty: none.
    pub blockio_config_file: PathBuf,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            root: "/var/lib/husk".into(),
            state: "/run/husk".into(),
            listen: "/run/husk/husk.sock".into(),
            log_level: "info".into(),
            log_format: "text".into(),
            sandbox_image: "registry.k8s.io/pause:3.10".into(),
            mount_namespace: "pod".into(),
            registry: RegistryConfig::default(),
            cni: CniConfig::default(),
            cgroup: CgroupConfig::default(),
            streaming: StreamingConfig::default(),
            cdi: CdiConfig::default(),
            metrics: MetricsConfig::default(),
            tracing: TracingConfig::default(),
            nri: NriConfig::default(),
            default_runtime: "husk".into(),
            runtimes: runtimes::defaults(),
        }
    }
}

impl Default for RegistryConfig {
    fn default() -> Self {
        RegistryConfig {
            config_dir: "/etc/husk/certs.d".into(),
            max_concurrent_downloads: 3,
            stall_timeout_secs: 60,
        }
    }
}

impl Default for CniConfig {
    fn default() -> Self {
        CniConfig {
            conf_dir: "/etc/cni/net.d".into(),
            bin_dirs: vec!["/opt/cni/bin".into(), "/usr/lib/cni".into()],
            plugin_timeout_secs: 60,
        }
    }
}

impl Default for CgroupConfig {
    fn default() -> Self {
        CgroupConfig {
            driver: "auto".into(),
            blockio_config_file: PathBuf::new(),
        }
    }
}

impl Config {
    /// Loads `path` and its drop-ins (`layers.rs`); when `explicit` is
    /// false a missing file means defaults.
    pub fn load(path: &Path, explicit: bool) -> Result<Config, ConfigError> {
        layers::load(path, explicit).map(|l| l.config)
    }

    /// Parses TOML text (no validation beyond the schema).
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        toml::from_str::<Config>(text).map_err(|e| {
            // toml's message spans several lines with a source excerpt; keep
            // the one line that names the key and the problem.
            let msg = e.message().trim().to_string();
            let at = e
                .span()
                .map(|s| {
                    let line = text[..s.start.min(text.len())].matches('\n').count() + 1;
                    format!(" (line {line})")
                })
                .unwrap_or_default();
            ConfigError(format!("{msg}{at}"))
        })
    }

    /// Checks values the schema cannot: one line per problem, naming the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (key, p) in [
            ("root", &self.root),
            ("state", &self.state),
            ("listen", &self.listen),
            ("registry.config_dir", &self.registry.config_dir),
            ("cni.conf_dir", &self.cni.conf_dir),
        ] {
            if !p.is_absolute() {
                return Err(ConfigError(format!(
                    "{key}: {:?} must be an absolute path",
                    p.display().to_string()
                )));
            }
        }
        self.nri.validate()?;
        for p in &self.cni.bin_dirs {
            if !p.is_absolute() {
                return Err(ConfigError(format!(
                    "cni.bin_dirs: {:?} must be an absolute path",
                    p.display().to_string()
                )));
            }
        }
        if self.log_level.trim().is_empty()
            || tracing_subscriber::EnvFilter::try_new(&self.log_level).is_err()
        {
            return Err(ConfigError(format!(
                "log_level: {:?} is not a level (trace, debug, info, warn, error)",
                self.log_level
            )));
        }
        if !matches!(self.log_format.as_str(), "text" | "json") {
            return Err(ConfigError(format!(
                "log_format: {:?} must be \"text\" or \"json\"",
                self.log_format
            )));
        }
        if let Err(e) = crate::reference::Reference::parse(&self.sandbox_image) {
            return Err(ConfigError(format!("sandbox_image: {e}")));
        }
        if !matches!(self.mount_namespace.as_str(), "node" | "pod") {
            return Err(ConfigError(format!(
                "mount_namespace: {:?} must be \"node\" or \"pod\"",
                self.mount_namespace
            )));
        }
        if self.registry.max_concurrent_downloads == 0 {
            return Err(ConfigError(
                "registry.max_concurrent_downloads: must be at least 1".into(),
            ));
        }
        if self.registry.stall_timeout_secs == 0 {
            return Err(ConfigError(
                "registry.stall_timeout_secs: must be at least 1".into(),
            ));
        }
        if self.cni.plugin_timeout_secs == 0 {
            return Err(ConfigError(
                "cni.plugin_timeout_secs: must be at least 1".into(),
            ));
        }
        if self
            .streaming
            .address
            .parse::<std::net::SocketAddr>()
            .is_err()
        {
            return Err(ConfigError(format!(
                "streaming.address: {:?} is not an ip:port",
                self.streaming.address
            )));
        }
        if self.streaming.tls_cert.is_empty() != self.streaming.tls_key.is_empty() {
            return Err(ConfigError(
                "streaming.tls_cert, streaming.tls_key: set both or neither".into(),
            ));
        }
        if self.streaming.token_ttl_secs == 0 {
            return Err(ConfigError(
                "streaming.token_ttl_secs: must be at least 1".into(),
            ));
        }
        if !["auto", "systemd", "cgroupfs"].contains(&self.cgroup.driver.as_str()) {
            return Err(ConfigError(format!(
                "cgroup.driver: {:?} is not one of \"auto\", \"systemd\", \"cgroupfs\"",
                self.cgroup.driver
            )));
        }
        self.tracing.validate()?;
        runtimes::validate(&self.runtimes, &self.default_runtime)
    }

    /// The documented default config, as printed by `husk config default`.
    pub fn default_toml() -> String {
        Config::default().to_toml()
    }

    /// This config as documented TOML (every key, with its comment).
    pub fn to_toml(&self) -> String {
        let d = self;
        let bins: Vec<String> = d
            .cni
            .bin_dirs
            .iter()
            .map(|p| format!("{:?}", p.display().to_string()))
            .collect();
        let cdi: Vec<String> = d
            .cdi
            .spec_dirs
            .iter()
            .map(|p| format!("{:?}", p.display().to_string()))
            .collect();
        format!(
            r#"# husk configuration. Every key is optional; command-line flags override it.

# Persistent state: content store, snapshots, image and pod records.
root = {root:?}
# Volatile state (tmpfs): sockets, namespace pins, exit files.
state = {state:?}
# The CRI v1 unix socket (mode 0660) that kubelet and crictl connect to.
listen = {listen:?}
# trace, debug, info, warn, error, or a tracing filter such as "husk=debug,info".
log_level = {log_level:?}
# "text" or "json".
log_format = {log_format:?}
# The pause image that holds each pod's namespaces.
sandbox_image = {sandbox_image:?}
# Where each pod's mounts (rootfs, /dev/shm, namespace pins) live: "node",
# the node's mount namespace; "pod", a mount namespace of the pod's
# monitor, so that the node's mount table does not grow with its pods and
# a container's create costs the same at the thousandth pod as at the
# first. "pod" needs the kernel's open_tree and move_mount (Linux 5.2),
# and makes root and state private mounts (each bound onto itself).
mount_namespace = {mount_namespace:?}
# The runtime handler of a pod that names none (a [runtimes.*] table).
default_runtime = {default_runtime:?}

[registry]
# Per-registry host configuration in containerd's hosts.toml format:
# <config_dir>/<host[:port]>/hosts.toml (and _default/hosts.toml).
config_dir = {config_dir:?}
# Layers of one image downloaded in parallel.
max_concurrent_downloads = {mcd}
# Seconds a blob download may make no progress before it is abandoned.
stall_timeout_secs = {stall}

[cni]
# Network configuration; the first conflist in lexical order is used.
conf_dir = {conf_dir:?}
# Plugin binary directories, searched in order.
bin_dirs = [{bins}]
# Seconds a plugin (ADD or DEL) may run before it is killed and the call
# fails; a StopPodSandbox whose DEL failed retries it on the next call.
plugin_timeout_secs = {cni_timeout}

[cgroup]
# Who makes the pods' cgroups; must match the kubelet's cgroupDriver.
# "systemd": transient scopes in the kubelet's slices, made over D-Bus
# (cgroup v2 with systemd as PID 1). "cgroupfs": directories husk makes.
# "auto": systemd where systemd is PID 1 on cgroup v2, cgroupfs elsewhere.
driver = {driver:?}

[streaming]
# Where the exec/attach/port-forward server listens; port 0 picks a free
# port (the Exec, Attach and PortForward RPCs return its URLs).
address = {saddr:?}
# PEM certificate and key to serve https; empty: plain http.
tls_cert = {tls_cert:?}
tls_key = {tls_key:?}
# Seconds a streaming URL may wait to be used (it is used once).
token_ttl_secs = {ttl}

[cdi]
# CDI spec files (*.json, *.yaml, *.yml) describing the devices containers
# ask for by cdi_devices or cdi.k8s.io/ annotations, lowest priority first:
# a device a later dir defines overrides an earlier one's.
spec_dirs = [{cdi}]

[metrics]
# Prometheus metrics at /metrics on this address: "127.0.0.1:9099" or
# "unix:///run/husk/metrics.sock"; empty: none.
address = {metrics:?}

[tracing]
# OpenTelemetry spans over OTLP/gRPC to this collector: "http://127.0.0.1:4317"
# (plain gRPC: a node-local collector); empty: no tracing. A span per CRI
# call, its parent the caller's W3C traceparent, with children for husk's
# stages and its shims' work.
endpoint = {tr_endpoint:?}
# The share of traces that start here which are kept (0.0 to 1.0); a call
# whose traceparent is sampled is traced, one whose is not never is.
sampling_ratio = {tr_ratio:?}
# Finished spans waiting for export; past this they are dropped and counted
# (husk_trace_spans_dropped_total): a slow collector never slows a call.
queue_size = {tr_queue}

# Runtime handlers: the names a RuntimeClass's handler may give. Each
# table adds a handler or replaces a built-in one (husk, runc) by name.
# type = "husk": husk's own path (youki's libcontainer in husk's shim).
# type = "oci": an OCI runtime speaking runc's command line (runc, crun,
#   runsc), driven by husk's shim, which stays the containers' monitor.
#   path: its binary (a bare name is looked up on PATH); root: its state
#   root (empty: <state>/runtimes/<name>); options: global flags before
#   each command (--systemd-cgroup is added under the systemd driver);
#   no_pivot_root: create --no-pivot.
# privileged_without_host_devices: privileged containers get no host
#   devices. pod_annotations: pod annotations (`*` globs) copied into the
#   OCI spec. timeout_secs: how long one runtime call may take (1 to 20).
{runtimes}"#,
            root = d.root.display().to_string(),
            state = d.state.display().to_string(),
            listen = d.listen.display().to_string(),
            log_level = d.log_level,
            log_format = d.log_format,
            sandbox_image = d.sandbox_image,
            mount_namespace = d.mount_namespace,
            config_dir = d.registry.config_dir.display().to_string(),
            mcd = d.registry.max_concurrent_downloads,
            stall = d.registry.stall_timeout_secs,
            conf_dir = d.cni.conf_dir.display().to_string(),
            bins = bins.join(", "),
            cni_timeout = d.cni.plugin_timeout_secs,
            driver = d.cgroup.driver,
            saddr = d.streaming.address,
            ttl = d.streaming.token_ttl_secs,
            tls_cert = d.streaming.tls_cert,
            tls_key = d.streaming.tls_key,
            cdi = cdi.join(", "),
            metrics = d.metrics.address,
            tr_endpoint = d.tracing.endpoint,
            tr_ratio = d.tracing.sampling_ratio,
            tr_queue = d.tracing.queue_size,
            default_runtime = d.default_runtime,
            runtimes = runtimes::to_toml(&d.runtimes),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_toml_round_trips() {
        let parsed = Config::parse(&Config::default_toml()).expect("default parses");
        assert_eq!(parsed, Config::default());
        parsed.validate().expect("defaults are valid");
    }

    #[test]
    fn unknown_key_is_named() {
        let e = Config::parse("root = \"/x\"\nbogus = 1\n").expect_err("unknown key");
        assert!(e.0.contains("bogus"), "{}", e.0);
        assert!(e.0.contains("line 2"), "{}", e.0);
        assert!(!e.0.contains('\n'), "one line: {}", e.0);
    }

    #[test]
    fn wrong_type_is_named() {
        let e = Config::parse("[registry]\nmax_concurrent_downloads = \"x\"\n").expect_err("type");
        assert!(e.0.contains("invalid type"), "{}", e.0);
    }

    #[test]
    fn validation_names_the_key() {
        let c = Config {
            log_format: "xml".into(),
            ..Config::default()
        };
        let e = c.validate().expect_err("bad format");
        assert!(e.0.starts_with("log_format:"), "{}", e.0);
        let c = Config {
            root: "relative".into(),
            ..Config::default()
        };
        assert!(c.validate().expect_err("relative").0.starts_with("root:"));
        let c = Config {
            sandbox_image: "Bad Ref".into(),
            ..Config::default()
        };
        assert!(c
            .validate()
            .expect_err("bad ref")
            .0
            .starts_with("sandbox_image:"));
    }

    #[test]
    fn missing_default_file_means_defaults_but_explicit_is_error() {
        let p = Path::new("/nonexistent/husk/config.toml");
        assert_eq!(Config::load(p, false).expect("defaults"), Config::default());
        assert!(Config::load(p, true).is_err());
    }
}
