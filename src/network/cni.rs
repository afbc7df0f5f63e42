//! CNI: executes the network plugins per the CNI spec (1.0, and the 0.3/0.4
//! configs still in use).
//!
//! - Config: the first file in lexical order in the conf dir (`.conflist`,
//!   or a single-plugin `.conf`/`.json`), as libcni does.
//! - ADD runs each plugin of the list in order with `CNI_COMMAND=ADD`,
//!   `CNI_CONTAINERID`, `CNI_NETNS`, `CNI_IFNAME`, `CNI_PATH` and `CNI_ARGS`
//!   (`K8S_POD_NAMESPACE`, `K8S_POD_NAME`, `K8S_POD_INFRA_CONTAINER_ID`,
//!   `K8S_POD_UID`); stdin carries the plugin config with the list's `name`
//!   and `cniVersion`, the previous plugin's result as `prevResult`, and
//!   `runtimeConfig` for the capabilities the plugin declares
//!   (`portMappings`, `dns`, ...).
//! - The final result is cached (`<cache>/<network>-<container>-<ifname>.json`)
//!   so DEL, run in reverse order, gets it as `prevResult` even after a
//!   restart. DEL is idempotent: a missing cache or netns is not an error.
//! - A failing plugin's error (`{"code", "msg", "details"}`) is surfaced
//!   with its plugin name.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Errors of the CNI layer.
#[derive(Debug, thiserror::Error)]
pub enum CniError {
    #[error("no CNI network config in {0}")]
    NoConfig(PathBuf),
    #[error("CNI config {path}: {reason}")]
    BadConfig { path: PathBuf, reason: String },
    #[error("CNI plugin {plugin:?} not found in {dirs}")]
    PluginNotFound { plugin: String, dirs: String },
    #[error("CNI plugin {plugin} failed ({command}): code {code}: {msg}{details}")]
    Plugin {
        plugin: String,
        command: String,
        code: u32,
        msg: String,
        details: String,
    },
    /// The kernel refused one more port on a Linux bridge (EXFULL): its
    /// port numbers are 10 bits, so a bridge holds at most 1,023 ports,
    /// one a pod.
    #[error(
        "CNI plugin {plugin} failed ({command}): {msg}: the network's bridge holds {BRIDGE_PORTS} \
         ports, the most a Linux bridge takes (one a pod); more pods on this node need a network \
         of more than one bridge, or one without a bridge (ptp, ipvlan, macvlan)"
    )]
    BridgeFull {
        plugin: String,
        command: String,
        msg: String,
    },
    #[error("CNI plugin {plugin} ({command}) did not finish in {after:?} and was killed")]
    Timeout {
        plugin: String,
        command: String,
        after: std::time::Duration,
    },
    #[error("CNI {what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
}

/// The ports a Linux bridge takes (`BR_MAX_PORTS` less port 0).
pub const BRIDGE_PORTS: usize = 1023;

/// A plugin's failure, told apart when it is the bridge's port limit
/// (the kernel's EXFULL, "Exchange full").
fn plugin_failure(
    plugin: String,
    command: &str,
    code: u32,
    msg: String,
    details: String,
) -> CniError {
    if msg.to_ascii_lowercase().contains("exchange full") {
        return CniError::BridgeFull {
            plugin,
            command: command.to_string(),
            msg,
        };
    }
    CniError::Plugin {
        plugin,
        command: command.to_string(),
        code,
        msg,
        details,
    }
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> CniError {
    let what = what.into();
    move |source| CniError::Io { what, source }
}

/// A network config list.
#[derive(Debug, Clone)]
pub struct NetworkList {
    pub name: String,
    pub cni_version: String,
    pub plugins: Vec<Value>,
    pub file: PathBuf,
}

impl NetworkList {
    /// The first config in lexical order in `dir`, or None if there is none.
    pub fn load_first(dir: &Path) -> Result<Option<NetworkList>, CniError> {
        let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
            Ok(rd) => rd
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.is_file()
                        && matches!(
                            p.extension().and_then(|x| x.to_str()),
                            Some("conflist" | "conf" | "json")
                        )
                })
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(format!("read {}", dir.display()))(e)),
        };
        files.sort();
        match files.first() {
            Some(f) => NetworkList::load(f).map(Some),
            None => Ok(None),
        }
    }

    pub fn load(path: &Path) -> Result<NetworkList, CniError> {
        let text = std::fs::read(path).map_err(io(format!("read {}", path.display())))?;
        NetworkList::parse(&text, path)
    }

    /// Parses a network config's bytes; `path` names it in errors, and its
    /// extension tells a `.conflist` from a single-plugin `.conf`.
    pub fn parse(text: &[u8], path: &Path) -> Result<NetworkList, CniError> {
        let bad = |reason: String| CniError::BadConfig {
            path: path.to_path_buf(),
            reason,
        };
        let v: Value = serde_json::from_slice(text).map_err(|e| bad(e.to_string()))?;
        let name = v["name"]
            .as_str()
            .ok_or_else(|| bad("missing \"name\"".into()))?
            .to_string();
        let cni_version = v["cniVersion"].as_str().unwrap_or("0.4.0").to_string();
        let plugins = if path.extension().and_then(|x| x.to_str()) == Some("conflist") {
            v["plugins"]
                .as_array()
                .cloned()
                .ok_or_else(|| bad("a .conflist needs a \"plugins\" array".into()))?
        } else {
            vec![v.clone()]
        };
        if plugins.is_empty() {
            return Err(bad("no plugins".into()));
        }
        for p in &plugins {
            if p["type"].as_str().is_none() {
                return Err(bad("a plugin has no \"type\"".into()));
            }
        }
        if cni_version.starts_with("0.1") || cni_version.starts_with("0.2") {
            return Err(bad(format!(
                "cniVersion {cni_version} is not supported (0.3.0 or later)"
            )));
        }
        Ok(NetworkList {
            name,
            cni_version,
            plugins,
            file: path.to_path_buf(),
        })
    }
}

/// Where and for whom a network is attached.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Attachment {
    pub container_id: String,
    pub netns: PathBuf,
    pub ifname: String,
    /// CNI_ARGS pairs.
    pub args: Vec<(String, String)>,
    /// Capability arguments by capability name (`portMappings`, `dns`, ...).
    pub capability_args: serde_json::Map<String, Value>,
}

impl Attachment {
    /// The kubelet's CNI_ARGS for a pod.
    pub fn for_pod(
        container_id: &str,
        netns: &Path,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> Attachment {
        Attachment {
            container_id: container_id.to_string(),
            netns: netns.to_path_buf(),
            ifname: "eth0".to_string(),
            args: vec![
                ("IgnoreUnknown".into(), "1".into()),
                ("K8S_POD_NAMESPACE".into(), namespace.into()),
                ("K8S_POD_NAME".into(), name.into()),
                ("K8S_POD_INFRA_CONTAINER_ID".into(), container_id.into()),
                ("K8S_POD_UID".into(), uid.into()),
            ],
            capability_args: serde_json::Map::new(),
        }
    }
}

/// The cache record kept between ADD and DEL.
#[derive(Debug, Serialize, Deserialize)]
struct CacheRecord {
    kind: String,
    #[serde(rename = "containerId")]
    container_id: String,
    #[serde(rename = "ifName")]
    if_name: String,
    #[serde(rename = "networkName")]
    network_name: String,
    #[serde(rename = "netnsPath")]
    netns: PathBuf,
    result: Value,
}

/// Runs plugins from `bin_dirs` and caches results under `cache_dir`.
#[derive(Debug, Clone)]
pub struct Cni {
    pub bin_dirs: Vec<PathBuf>,
    pub cache_dir: PathBuf,
    /// How long one plugin run may take before it is killed.
    pub timeout: std::time::Duration,
}

/// A pod's addresses from a CNI result, IPv4 first.
pub fn pod_ips(result: &Value) -> Vec<String> {
    let mut v4 = Vec::new();
    let mut v6 = Vec::new();
    for ip in result["ips"].as_array().into_iter().flatten() {
        let Some(addr) = ip["address"].as_str() else {
            continue;
        };
        // A plugin's garbage is not reported as the pod's address (found
        // by the cni_result fuzz target: "10.1.2.3.16" was passed on).
        let bare = addr.split('/').next().unwrap_or(addr);
        match bare.parse::<std::net::IpAddr>() {
            Ok(std::net::IpAddr::V4(a)) => v4.push(a.to_string()),
            Ok(std::net::IpAddr::V6(a)) => v6.push(a.to_string()),
            Err(_) => tracing::warn!(address = addr, "CNI result: not an IP address; ignored"),
        }
    }
    v4.extend(v6);
    v4
}

impl Cni {
    fn find(&self, plugin: &str) -> Result<PathBuf, CniError> {
        if plugin.contains('/') {
            return Err(CniError::PluginNotFound {
                plugin: plugin.into(),
                dirs: "(plugin types may not contain '/')".into(),
            });
        }
        self.bin_dirs
            .iter()
            .map(|d| d.join(plugin))
            .find(|p| p.is_file())
            .ok_or_else(|| CniError::PluginNotFound {
                plugin: plugin.into(),
                dirs: self
                    .bin_dirs
                    .iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(":"),
            })
    }

    fn cache_path(&self, net: &NetworkList, att: &Attachment) -> PathBuf {
        self.cache_dir.join(format!(
            "{}-{}-{}.json",
            net.name, att.container_id, att.ifname
        ))
    }

    /// The config a plugin gets on stdin.
    fn plugin_config(
        net: &NetworkList,
        plugin: &Value,
        att: &Attachment,
        prev: Option<&Value>,
    ) -> Value {
        let mut conf = plugin.clone();
        conf["name"] = json!(net.name);
        conf["cniVersion"] = json!(net.cni_version);
        if let Some(p) = prev {
            conf["prevResult"] = p.clone();
        }
        let mut rc = serde_json::Map::new();
        if let Some(caps) = plugin["capabilities"].as_object() {
            for (cap, on) in caps {
                if on.as_bool() == Some(true) {
                    if let Some(arg) = att.capability_args.get(cap) {
                        rc.insert(cap.clone(), arg.clone());
                    }
                }
            }
        }
        if !rc.is_empty() {
            conf["runtimeConfig"] = Value::Object(rc);
        }
        conf
    }

    fn exec(
        &self,
        command: &str,
        net: &NetworkList,
        plugin: &Value,
        att: &Attachment,
        prev: Option<&Value>,
    ) -> Result<Value, CniError> {
        let kind = plugin["type"].as_str().unwrap_or_default().to_string();
        let bin = self.find(&kind)?;
        let conf = serde_json::to_vec(&Cni::plugin_config(net, plugin, att, prev))
            .map_err(|e| io("encode plugin config")(std::io::Error::other(e)))?;
        let args = att
            .args
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(";");
        let path = self
            .bin_dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(":");
        let child = std::os::unix::process::CommandExt::process_group(&mut Command::new(&bin), 0)
            .env_clear()
            .env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", &att.container_id)
            .env("CNI_NETNS", &att.netns)
            .env("CNI_IFNAME", &att.ifname)
            .env("CNI_ARGS", args)
            .env("CNI_PATH", path)
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(io(format!("start {}", bin.display())))?;
        let out = super::bounded::run(child, conf, self.timeout).map_err(|e| match e {
            super::bounded::Bounded::TimedOut => CniError::Timeout {
                plugin: kind.clone(),
                command: command.to_string(),
                after: self.timeout,
            },
            super::bounded::Bounded::Io(e) => io(format!("run {kind}"))(e),
        })?;
        if !out.status.success() {
            let err: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
            let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
            return Err(plugin_failure(
                kind,
                command,
                err["code"].as_u64().unwrap_or(999) as u32,
                err["msg"].as_str().map(str::to_string).unwrap_or_else(|| {
                    if stderr.is_empty() {
                        format!("exit {}", out.status)
                    } else {
                        stderr.clone()
                    }
                }),
                err["details"]
                    .as_str()
                    .filter(|d| !d.is_empty())
                    .map(|d| format!(" ({d})"))
                    .unwrap_or_default(),
            ));
        }
        if out.stdout.iter().all(u8::is_ascii_whitespace) {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&out.stdout).map_err(|e| CniError::Plugin {
            plugin: kind,
            command: command.to_string(),
            code: 999,
            msg: format!("unparsable result: {e}"),
            details: String::new(),
        })
    }

    /// ADD: attaches the network and caches the result. On a failure the
    /// plugins already run are undone (DEL) before the error is returned.
    pub fn add(&self, net: &NetworkList, att: &Attachment) -> Result<Value, CniError> {
        let t0 = std::time::Instant::now();
        let r = self.add_all(net, att);
        crate::metrics::cni("add", r.is_ok(), t0.elapsed());
        r
    }

    fn add_all(&self, net: &NetworkList, att: &Attachment) -> Result<Value, CniError> {
        let mut prev: Option<Value> = None;
        let mut steps = crate::timing::Stages::new("CNI ADD");
        for (i, plugin) in net.plugins.iter().enumerate() {
            let r = self.exec("ADD", net, plugin, att, prev.as_ref());
            steps.end_external(plugin["type"].as_str().unwrap_or_default());
            match r {
                Ok(r) if !r.is_null() => prev = Some(r),
                Ok(_) => {}
                Err(e) => {
                    for p in net.plugins[..=i].iter().rev() {
                        if let Err(de) = self.exec("DEL", net, p, att, prev.as_ref()) {
                            tracing::warn!(error = %de, "CNI DEL while unwinding a failed ADD");
                        }
                    }
                    return Err(e);
                }
            }
        }
        let result = prev.unwrap_or(Value::Null);
        let rec = CacheRecord {
            kind: "cniCacheV1".into(),
            container_id: att.container_id.clone(),
            if_name: att.ifname.clone(),
            network_name: net.name.clone(),
            netns: att.netns.clone(),
            result: result.clone(),
        };
        crate::store::atomic::write_state_json(&self.cache_path(net, att), &rec)
            .map_err(io("write CNI result cache"))?;
        steps.end("cache");
        steps.finish();
        Ok(result)
    }

    /// The cached ADD result, if any.
    pub fn cached(&self, net: &NetworkList, att: &Attachment) -> Option<Value> {
        crate::store::atomic::read_json::<CacheRecord>(&self.cache_path(net, att))
            .ok()
            .flatten()
            .map(|r| r.result)
    }

    /// DEL: detaches in reverse order with the cached result; idempotent.
    pub fn del(&self, net: &NetworkList, att: &Attachment) -> Result<(), CniError> {
        let t0 = std::time::Instant::now();
        let r = self.del_all(net, att);
        crate::metrics::cni("del", r.is_ok(), t0.elapsed());
        r
    }

    fn del_all(&self, net: &NetworkList, att: &Attachment) -> Result<(), CniError> {
        let prev = self.cached(net, att);
        let mut first_err = None;
        let mut steps = crate::timing::Stages::new("CNI DEL");
        for plugin in net.plugins.iter().rev() {
            let r = self.exec("DEL", net, plugin, att, prev.as_ref());
            steps.end_external(plugin["type"].as_str().unwrap_or_default());
            if let Err(e) = r {
                tracing::warn!(error = %e, "CNI DEL failed");
                first_err.get_or_insert(e);
            }
        }
        steps.finish();
        if let Some(e) = first_err {
            return Err(e);
        }
        match std::fs::remove_file(self.cache_path(net, att)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io("remove CNI cache")(e)),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_bridge_port_limit_is_told_apart_from_other_failures() {
        let full = super::plugin_failure(
            "bridge".into(),
            "ADD",
            11,
            "failed to connect \"vethab\" to bridge cni0: Exchange full".into(),
            String::new(),
        );
        assert!(matches!(full, CniError::BridgeFull { .. }), "{full:?}");
        let other = super::plugin_failure(
            "bridge".into(),
            "ADD",
            11,
            "no such device".into(),
            String::new(),
        );
        assert!(
            matches!(other, CniError::Plugin { code: 11, .. }),
            "{other:?}"
        );
    }

    use super::*;

    #[test]
    fn pod_ips_are_addresses_v4_first() {
        let r = serde_json::json!({"ips": [
            {"address": "fd00::5/64"}, {"address": "10.1.2.3.16"},
            {"address": "10.88.0.5/24"}, {"address": 7}, {"address": "nonsense"}
        ]});
        assert_eq!(pod_ips(&r), vec!["10.88.0.5", "fd00::5"]);
    }

    #[test]
    fn runtime_config_only_for_declared_capabilities() {
        let net = NetworkList {
            name: "n".into(),
            cni_version: "1.0.0".into(),
            plugins: vec![],
            file: PathBuf::new(),
        };
        let mut att = Attachment::for_pod("c1", Path::new("/ns"), "default", "p", "u");
        att.capability_args.insert(
            "portMappings".into(),
            json!([{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]),
        );
        att.capability_args
            .insert("dns".into(), json!({"servers": ["1.1.1.1"]}));
        let portmap = json!({"type": "portmap", "capabilities": {"portMappings": true}});
        let c = Cni::plugin_config(&net, &portmap, &att, Some(&json!({"cniVersion": "1.0.0"})));
        assert_eq!(c["name"], "n");
        assert_eq!(c["cniVersion"], "1.0.0");
        assert_eq!(c["runtimeConfig"]["portMappings"][0]["hostPort"], 8080);
        assert!(c["runtimeConfig"].get("dns").is_none());
        assert_eq!(c["prevResult"]["cniVersion"], "1.0.0");
        let bridge = json!({"type": "bridge"});
        assert!(Cni::plugin_config(&net, &bridge, &att, None)
            .get("runtimeConfig")
            .is_none());
    }

    #[test]
    fn pod_ips_v4_first() {
        let r = json!({"ips": [{"address": "fd00::5/64"}, {"address": "10.1.2.3/24", "gateway": "10.1.2.1"}]});
        assert_eq!(
            pod_ips(&r),
            vec!["10.1.2.3".to_string(), "fd00::5".to_string()]
        );
    }

    #[test]
    fn loads_first_config_in_lexical_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join("20-b.conflist"),
            r#"{"cniVersion":"1.0.0","name":"b","plugins":[{"type":"bridge"}]}"#,
        )
        .expect("w");
        std::fs::write(
            dir.path().join("10-a.conf"),
            r#"{"cniVersion":"0.4.0","name":"a","type":"bridge"}"#,
        )
        .expect("w");
        let n = NetworkList::load_first(dir.path())
            .expect("load")
            .expect("some");
        assert_eq!(n.name, "a");
        assert_eq!(n.plugins.len(), 1);
        std::fs::write(dir.path().join("05-bad.conflist"), "{").expect("w");
        assert!(NetworkList::load_first(dir.path()).is_err());
        assert!(NetworkList::load_first(&dir.path().join("none"))
            .expect("missing")
            .is_none());
    }
}
