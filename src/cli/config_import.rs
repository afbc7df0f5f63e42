//! `husk config import-containerd [FILE]`: a husk config carrying over what
//! maps from a containerd config.toml (versions 1, 2 and 3), and a list of
//! what cannot be carried, with why.
//!
//! Carried: the registry `config_path` (hosts.toml directories work
//! unchanged), `sandbox_image`, the CNI `bin_dir`/`bin_dirs` and
//! `conf_dir`, `max_concurrent_downloads`, the streaming server's address,
//! port and TLS pair. `restrict_oom_score_adj` needs no setting: husk always
//! clamps oom_score_adj to what it may set. The runc-shim runtimes
//! (`runtimes.*`) become OCI runtime handlers (`config_runtimes.rs`); the
//! NRI table becomes `[nri]` (`config_nri.rs`).
//! Everything else that a node's config commonly sets is named in the
//! notes.

use crate::config::{Config, ConfigError};
use std::path::{Path, PathBuf};
use toml::Value;

/// The default place of containerd's config.
pub const DEFAULT_CONTAINERD_CONFIG: &str = "/etc/containerd/config.toml";

/// A husk config and the settings left behind.
#[derive(Debug)]
pub struct Imported {
    pub config: Config,
    /// One line per setting carried: `containerd key -> husk key`.
    pub carried: Vec<String>,
    /// One line per setting not carried, with why.
    pub left: Vec<String>,
}

impl Imported {
    /// The config as TOML, headed by what was carried and left.
    pub fn render(&self, source: &Path) -> String {
        let mut out = format!(
            "# Imported from {} by `husk config import-containerd`.\n",
            source.display()
        );
        for c in &self.carried {
            out += &format!("# carried: {c}\n");
        }
        for l in &self.left {
            out += &format!("# not carried: {l}\n");
        }
        out.push('\n');
        out + &self.config.to_toml()
    }
}

fn get<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, k| v.get(*k))
}

fn text(v: &Value, path: &[&str]) -> Option<String> {
    get(v, path).and_then(|x| match x {
        Value::String(s) => Some(s.clone()),
        Value::Integer(i) => Some(i.to_string()),
        _ => None,
    })
}

/// Reads and converts `path`.
pub fn import(path: &Path) -> Result<Imported, ConfigError> {
    let src = std::fs::read_to_string(path)
        .map_err(|e| ConfigError(format!("{}: {e}", path.display())))?;
    convert(&src).map_err(|e| ConfigError(format!("{}: {}", path.display(), e.0)))
}

/// Converts containerd config text.
pub fn convert(src: &str) -> Result<Imported, ConfigError> {
    let v: Value = toml::from_str(src).map_err(|e| {
        let line = e
            .span()
            .map(|s| src[..s.start.min(src.len())].lines().count().max(1))
            .unwrap_or(1);
        let msg = e.message().split_whitespace().collect::<Vec<_>>().join(" ");
        ConfigError(format!("not valid TOML (line {line}): {msg}"))
    })?;
    let version = get(&v, &["version"])
        .and_then(Value::as_integer)
        .unwrap_or(1);
    // Where the CRI settings live in each config version.
    let (cri, images, runtime): (Vec<&str>, Vec<&str>, Vec<&str>) = match version {
        1 => (
            vec!["plugins", "cri"],
            vec!["plugins", "cri"],
            vec!["plugins", "cri"],
        ),
        2 => (
            vec!["plugins", "io.containerd.grpc.v1.cri"],
            vec!["plugins", "io.containerd.grpc.v1.cri"],
            vec!["plugins", "io.containerd.grpc.v1.cri"],
        ),
        // Version 4 (containerd 2.3) keeps version 3's CRI layout.
        3 | 4 => (
            vec!["plugins", "io.containerd.grpc.v1.cri"],
            vec!["plugins", "io.containerd.cri.v1.images"],
            vec!["plugins", "io.containerd.cri.v1.runtime"],
        ),
        n => {
            return Err(ConfigError(format!(
                "config version {n} is not one husk knows (1, 2, 3, 4)"
            )))
        }
    };
    let at = |base: &[&str], rest: &[&str]| -> Vec<String> {
        base.iter().chain(rest).map(|s| s.to_string()).collect()
    };
    let key = |p: &[String]| p.join(".");
    let look = |p: &[String]| -> Option<String> {
        let r: Vec<&str> = p.iter().map(String::as_str).collect();
        text(&v, &r)
    };
    let mut c = Config::default();
    let mut carried = Vec::new();
    let mut left = Vec::new();

    let sandbox = if version >= 3 {
        at(&images, &["pinned_images", "sandbox"])
    } else {
        at(&cri, &["sandbox_image"])
    };
    if let Some(s) = look(&sandbox) {
        c.sandbox_image = s;
        carried.push(format!("{} -> sandbox_image", key(&sandbox)));
    }
    let config_path = at(&images, &["registry", "config_path"]);
    if let Some(p) = look(&config_path) {
        c.registry.config_dir = PathBuf::from(p);
        carried.push(format!(
            "{} -> registry.config_dir (hosts.toml dirs work unchanged)",
            key(&config_path)
        ));
    }
    let mirrors = at(&images, &["registry", "mirrors"]);
    let mirrors_ref: Vec<&str> = mirrors.iter().map(String::as_str).collect();
    if let Some(m) = get(&v, &mirrors_ref).and_then(Value::as_table) {
        for (host, t) in m {
            let eps: Vec<String> = t
                .get("endpoint")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|e| e.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            left.push(format!(
                "{}.{host:?}: the deprecated mirrors form; write {}/{host}/hosts.toml with {} instead",
                key(&mirrors),
                c.registry.config_dir.display(),
                eps.iter()
                    .map(|e| format!("[host.{e:?}]"))
                    .collect::<Vec<_>>()
                    .join(" ")
            ));
        }
    }
    let configs = at(&images, &["registry", "configs"]);
    let configs_ref: Vec<&str> = configs.iter().map(String::as_str).collect();
    if let Some(m) = get(&v, &configs_ref).and_then(Value::as_table) {
        for host in m.keys() {
            left.push(format!(
                "{}.{host:?}: credentials come from the kubelet's image pull secrets, TLS settings belong in {host}/hosts.toml (ca, client, skip_verify)",
                key(&configs)
            ));
        }
    }
    let cni_dirs = at(&runtime, &["cni", "bin_dirs"]);
    let cni_dirs_ref: Vec<&str> = cni_dirs.iter().map(String::as_str).collect();
    if let Some(a) = get(&v, &cni_dirs_ref).and_then(Value::as_array) {
        c.cni.bin_dirs = a
            .iter()
            .filter_map(|x| x.as_str().map(PathBuf::from))
            .collect();
        carried.push(format!("{} -> cni.bin_dirs", key(&cni_dirs)));
    } else {
        let bin = at(&runtime, &["cni", "bin_dir"]);
        if let Some(b) = look(&bin) {
            c.cni.bin_dirs = vec![PathBuf::from(b)];
            carried.push(format!("{} -> cni.bin_dirs", key(&bin)));
        }
    }
    let conf = at(&runtime, &["cni", "conf_dir"]);
    if let Some(d) = look(&conf) {
        c.cni.conf_dir = PathBuf::from(d);
        carried.push(format!("{} -> cni.conf_dir", key(&conf)));
    }
    let cdi = at(&runtime, &["cdi_spec_dirs"]);
    let cdi_ref: Vec<&str> = cdi.iter().map(String::as_str).collect();
    if let Some(a) = get(&v, &cdi_ref).and_then(Value::as_array) {
        c.cdi.spec_dirs = a
            .iter()
            .filter_map(|x| x.as_str().map(PathBuf::from))
            .collect();
        carried.push(format!("{} -> cdi.spec_dirs", key(&cdi)));
    }
    // The tasks service's block I/O classes (versions 2 and later).
    let blockio = vec![
        "plugins".to_string(),
        "io.containerd.service.v1.tasks-service".to_string(),
        "blockio_config_file".to_string(),
    ];
    if let Some(f) = look(&blockio).filter(|f| !f.is_empty()) {
        c.cgroup.blockio_config_file = PathBuf::from(f);
        carried.push(format!("{} -> cgroup.blockio_config_file", key(&blockio)));
    }
    let mcd = at(&cri, &["max_concurrent_downloads"]);
    if let Some(n) = look(&mcd).and_then(|s| s.parse().ok()) {
        c.registry.max_concurrent_downloads = n;
        carried.push(format!(
            "{} -> registry.max_concurrent_downloads",
            key(&mcd)
        ));
    }
    let (addr_key, port_key) = (
        at(&cri, &["stream_server_address"]),
        at(&cri, &["stream_server_port"]),
    );
    let (a, p) = (look(&addr_key), look(&port_key));
    if a.is_some() || p.is_some() {
        let host = a
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "127.0.0.1".into());
        let port = p.filter(|s| !s.is_empty()).unwrap_or_else(|| "0".into());
        c.streaming.address = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        carried.push(format!(
            "{} and {} -> streaming.address",
            key(&addr_key),
            key(&port_key)
        ));
    }
    let tls = |k: &str| look(&at(&cri, &["x509_key_pair_streaming", k]));
    let tls_on = get(
        &v,
        &at(&cri, &["enable_tls_streaming"])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    )
    .and_then(Value::as_bool)
    .unwrap_or(false);
    if tls_on {
        match (tls("tls_cert_file"), tls("tls_key_file")) {
            (Some(cert), Some(k)) if !cert.is_empty() && !k.is_empty() => {
                c.streaming.tls_cert = cert;
                c.streaming.tls_key = k;
                carried.push("enable_tls_streaming with x509_key_pair_streaming -> streaming.tls_cert/tls_key".into());
            }
            _ => left.push("enable_tls_streaming without a key pair: containerd makes a self-signed pair, husk needs streaming.tls_cert and tls_key".into()),
        }
    }
    if get(
        &v,
        &at(&cri, &["restrict_oom_score_adj"])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    )
    .is_some()
    {
        carried.push("restrict_oom_score_adj -> (nothing to set: husk always clamps oom_score_adj to what it may set)".into());
    }
    for (k, why) in [
        ("root", "containerd's content store has another layout; husk keeps its own root (images are pulled again)"),
        ("state", "husk keeps its own volatile state dir"),
    ] {
        if get(&v, &[k]).is_some() {
            left.push(format!("{k}: {why}"));
        }
    }
    if get(&v, &["grpc", "address"]).is_some() {
        left.push("grpc.address: husk listens on its own socket (listen); point the kubelet's --container-runtime-endpoint at it".into());
    }
    let runtimes = at(&runtime, &["containerd", "runtimes"]);
    let runtimes_ref: Vec<&str> = runtimes.iter().map(String::as_str).collect();
    let default_rt = look(&at(&runtime, &["containerd", "default_runtime_name"]))
        .unwrap_or_else(|| "runc".into());
    // containerd's cgroup driver is its default runtime's SystemdCgroup
    // (false when unset): the kubelet was set up to match it.
    let systemd = get(&v, &runtimes_ref)
        .and_then(|rt| rt.get(&default_rt))
        .and_then(|t| get(t, &["options", "SystemdCgroup"]))
        .and_then(Value::as_bool);
    c.cgroup.driver = if systemd == Some(true) {
        "systemd"
    } else {
        "cgroupfs"
    }
    .into();
    carried.push(format!(
        "{}.{default_rt}.options.SystemdCgroup ({}) -> cgroup.driver = {:?} (as the kubelet's cgroupDriver)",
        key(&runtimes),
        systemd.map_or("unset: false".to_string(), |b| b.to_string()),
        c.cgroup.driver
    ));
    if let Some(rt) = get(&v, &runtimes_ref).and_then(Value::as_table) {
        let base = key(&runtimes);
        for (name, t) in rt {
            match super::config_runtimes::convert(name, t, systemd.unwrap_or(false)) {
                Ok((h, notes)) => {
                    let what = if h.is_shim() {
                        format!("type \"shim\", {}", h.runtime_type)
                    } else {
                        format!("type \"oci\", {}", h.path)
                    };
                    carried.push(format!("{base}.{name} -> runtimes.{name} ({what})"));
                    left.extend(notes.into_iter().map(|n| format!("{base}.{name}: {n}")));
                    c.runtimes.insert(name.clone(), h);
                }
                Err(why) => left.push(format!("{base}.{name}: {why}")),
            }
        }
        if default_rt != "runc" && c.runtimes.contains_key(&default_rt) {
            c.default_runtime = default_rt.clone();
            carried.push(format!(
                "default_runtime_name {default_rt:?} -> default_runtime"
            ));
        } else {
            left.push(format!(
                "default_runtime_name {default_rt:?}: default_runtime stays \"husk\" (husk's own path); set default_runtime = {default_rt:?} to run pods that name no handler under it"
            ));
        }
    }
    if let Some(t) = get(&v, &["plugins", "io.containerd.nri.v1.nri"]) {
        let (c2, l2) =
            super::config_nri::convert(t, &mut c.nri, "plugins.\"io.containerd.nri.v1.nri\"");
        carried.extend(c2);
        left.extend(l2);
    }
    let snap = at(&runtime, &["containerd", "snapshotter"]);
    if let Some(s) = look(&snap).filter(|s| s != "overlayfs") {
        left.push(format!(
            "{}: {s:?}; husk always uses overlayfs snapshots",
            key(&snap)
        ));
    }
    c.validate()?;
    Ok(Imported {
        config: c,
        carried,
        left,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_v2_config_with_everything() {
        let i = convert(
            r#"
version = 2
root = "/var/lib/containerd"
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.9"
  max_concurrent_downloads = 5
  stream_server_address = "0.0.0.0"
  stream_server_port = "10010"
  restrict_oom_score_adj = true
  cdi_spec_dirs = ["/etc/cdi", "/run/cdi"]
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/opt/cni/bin"
    conf_dir = "/etc/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "/etc/containerd/certs.d"
    [plugins."io.containerd.grpc.v1.cri".registry.mirrors."docker.io"]
      endpoint = ["https://mirror.example"]
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
    SystemdCgroup = true
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun.options]
      BinaryName = "/usr/bin/crun"
      SystemdCgroup = true
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.kata]
    runtime_type = "io.containerd.kata.v2"
"#,
        )
        .expect("convert");
        assert_eq!(i.config.sandbox_image, "registry.k8s.io/pause:3.9");
        assert_eq!(
            i.config.registry.config_dir,
            PathBuf::from("/etc/containerd/certs.d")
        );
        assert_eq!(i.config.registry.max_concurrent_downloads, 5);
        assert_eq!(i.config.streaming.address, "0.0.0.0:10010");
        assert_eq!(i.config.cni.bin_dirs, vec![PathBuf::from("/opt/cni/bin")]);
        assert_eq!(
            i.config.cdi.spec_dirs,
            vec![PathBuf::from("/etc/cdi"), PathBuf::from("/run/cdi")]
        );
        let left = i.left.join("\n");
        assert!(
            left.contains("docker.io") && left.contains("mirror.example"),
            "{left}"
        );
        assert!(left.contains("grpc.address"), "{left}");
        assert_eq!(i.config.cgroup.driver, "systemd");
        assert!(i.carried.join("\n").contains("SystemdCgroup (true)"));
        assert_eq!(i.config.runtimes["crun"].path, "/usr/bin/crun");
        assert!(i.config.runtimes["crun"].is_oci());
        assert!(i.config.runtimes["kata"].is_shim());
        assert_eq!(
            i.config.runtimes["kata"].runtime_type,
            "io.containerd.kata.v2"
        );
        assert!(i
            .carried
            .join("\n")
            .contains("runtimes.kata (type \"shim\""));
        assert_eq!(i.config.default_runtime, "husk");
        let back = Config::parse(&i.render(Path::new("/etc/containerd/config.toml")))
            .expect("the output parses as a husk config");
        assert_eq!(back, i.config);
    }

    #[test]
    fn a_v4_config_of_containerd_2_3() {
        let i = convert(
            r#"
version = 4
[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "registry.k8s.io/pause:3.10"
[plugins."io.containerd.cri.v1.runtime"]
  cdi_spec_dirs = ["/etc/cdi"]
  [plugins."io.containerd.cri.v1.runtime".cni]
    conf_dir = "/etc/cni/net.d"
[plugins."io.containerd.nri.v1.nri"]
  disable = false
  socket_path = "/var/run/nri/nri.sock"
[plugins."io.containerd.service.v1.tasks-service"]
  blockio_config_file = "/etc/containerd/blockio.yaml"
"#,
        )
        .expect("convert");
        assert_eq!(i.config.sandbox_image, "registry.k8s.io/pause:3.10");
        assert_eq!(i.config.cdi.spec_dirs, vec![PathBuf::from("/etc/cdi")]);
        assert_eq!(
            i.config.cgroup.blockio_config_file,
            PathBuf::from("/etc/containerd/blockio.yaml")
        );
        assert!(i.config.nri.enable);
        assert!(
            i.carried
                .join("\n")
                .contains("-> cgroup.blockio_config_file"),
            "{:?}",
            i.carried
        );
    }

    #[test]
    fn bad_input_is_one_line() {
        let e = convert("version = 2\n[plugins\n").expect_err("malformed");
        assert!(
            e.0.starts_with("not valid TOML") && !e.0.contains('\n'),
            "{}",
            e.0
        );
        assert!(convert("version = 9\n").is_err());
        let e = import(Path::new("/nonexistent/config.toml")).expect_err("missing");
        assert!(e.0.contains("/nonexistent/config.toml"), "{}", e.0);
    }
}
