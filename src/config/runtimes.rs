//! `[runtimes.<name>]`: the runtime handlers a pod may name (a
//! RuntimeClass's `handler`), and `default_runtime`, the one a pod that
//! names none runs under.
//!
//! A handler is husk's own path (`type = "husk"`: youki's libcontainer in
//! husk's shim), an OCI runtime that speaks runc's command line (`type =
//! "oci"`: runc, crun, runsc, youki's CLI), which husk's shim drives, or a
//! containerd shim v2 runtime (`type = "shim"`: containerd-shim-runc-v2,
//! Kata, gVisor's runsc shim, runwasi), named by its `runtime_type` as
//! containerd names it and given the `options` table containerd would give
//! it. The tables of a config file add to the built-in `husk` and `runc`
//! handlers, or replace them by name.

use super::ConfigError;
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeMap;

/// The longest an OCI runtime call may be given (the server waits for the
/// shim's answer a little longer than two of them).
pub const MAX_TIMEOUT_SECS: u64 = 20;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RuntimeConfig {
    /// "husk", "oci" or "shim".
    #[serde(rename = "type")]
    pub kind: String,
    /// The OCI runtime's binary: a path, or a name looked up on PATH. For
    /// a shim: its binary, an absolute path (containerd's `runtime_path`);
    /// empty: the binary `runtime_type` names, on PATH.
    pub path: String,
    /// A shim's runtime type as containerd names it
    /// (`io.containerd.runc.v2` runs `containerd-shim-runc-v2`).
    pub runtime_type: String,
    /// Its state root (`--root`); empty: `<state>/runtimes/<name>`.
    pub root: String,
    /// An OCI runtime's global flags, given before each command
    /// (`--systemd-cgroup` is added by husk under the systemd cgroup
    /// driver); a shim's options table (runc's `BinaryName`,
    /// `SystemdCgroup`; Kata's `ConfigPath`), as containerd's.
    pub options: RuntimeOptions,
    /// `create --no-pivot`: for a rootfs pivot_root(2) cannot leave (a
    /// ramdisk).
    pub no_pivot_root: bool,
    /// Privileged containers get no host devices (only those they ask for).
    pub privileged_without_host_devices: bool,
    /// Pod annotations (names; `*` matches any run of characters) copied
    /// into the OCI spec of the pod's pause and containers.
    pub pod_annotations: Vec<String>,
    /// Seconds one OCI runtime call may take before it is killed.
    pub timeout_secs: u64,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            kind: "husk".into(),
            path: String::new(),
            runtime_type: String::new(),
            root: String::new(),
            options: RuntimeOptions::default(),
            no_pivot_root: false,
            privileged_without_host_devices: false,
            pod_annotations: Vec::new(),
            timeout_secs: 10,
        }
    }
}

impl RuntimeConfig {
    pub fn is_oci(&self) -> bool {
        self.kind == "oci"
    }

    pub fn is_shim(&self) -> bool {
        self.kind == "shim"
    }
}

/// A handler's `options`: an OCI runtime's flags, or a shim's table.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum RuntimeOptions {
    Flags(Vec<String>),
    Table(toml::Table),
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        RuntimeOptions::Flags(Vec::new())
    }
}

impl RuntimeOptions {
    pub fn is_empty(&self) -> bool {
        match self {
            RuntimeOptions::Flags(f) => f.is_empty(),
            RuntimeOptions::Table(t) => t.is_empty(),
        }
    }

    /// An OCI runtime's flags (none for a table).
    pub fn flags(&self) -> &[String] {
        match self {
            RuntimeOptions::Flags(f) => f,
            RuntimeOptions::Table(_) => &[],
        }
    }

    /// A shim's table (empty for flags).
    pub fn table(&self) -> toml::Table {
        match self {
            RuntimeOptions::Flags(_) => toml::Table::new(),
            RuntimeOptions::Table(t) => t.clone(),
        }
    }
}

/// The binary containerd runs for a shim's `runtime_type`: the last two
/// of its dot-separated parts, as `containerd-shim-<a>-<b>`.
pub fn shim_binary_name(runtime_type: &str) -> Result<String, String> {
    let parts: Vec<&str> = runtime_type.split('.').collect();
    if parts.len() < 2 || parts[0].is_empty() || parts.iter().any(|p| p.is_empty()) {
        return Err(format!(
            "runtime_type {runtime_type:?} is not a shim's name (as io.containerd.runc.v2)"
        ));
    }
    let n = parts.len();
    Ok(format!("containerd-shim-{}-{}", parts[n - 2], parts[n - 1]))
}

/// The built-in handlers: husk's own, and runc on PATH.
pub fn defaults() -> BTreeMap<String, RuntimeConfig> {
    BTreeMap::from([
        ("husk".to_string(), RuntimeConfig::default()),
        (
            "runc".to_string(),
            RuntimeConfig {
                kind: "oci".into(),
                path: "runc".into(),
                ..RuntimeConfig::default()
            },
        ),
    ])
}

/// The file's tables over the built-in ones.
pub fn merge_defaults<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, RuntimeConfig>, D::Error> {
    let mine = BTreeMap::<String, RuntimeConfig>::deserialize(d)?;
    let mut all = defaults();
    all.extend(mine);
    Ok(all)
}

/// Whether `name` is a handler name the kubelet can send: a DNS label.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// Checks the handlers and the default's name.
pub fn validate(
    runtimes: &BTreeMap<String, RuntimeConfig>,
    default_runtime: &str,
) -> Result<(), ConfigError> {
    for (name, r) in runtimes {
        let key = format!("runtimes.{name}");
        if !valid_name(name) {
            return Err(ConfigError(format!(
                "{key}: a handler name must be a DNS label (a-z, 0-9, '-'; at most 63)"
            )));
        }
        match r.kind.as_str() {
            "husk" => {
                let set = [
                    ("path", !r.path.is_empty()),
                    ("root", !r.root.is_empty()),
                    ("options", !r.options.is_empty()),
                    ("no_pivot_root", r.no_pivot_root),
                    ("runtime_type", !r.runtime_type.is_empty()),
                ];
                if let Some((k, _)) = set.iter().find(|(_, on)| *on) {
                    return Err(ConfigError(format!(
                        "{key}.{k}: not for type \"husk\" (husk's own path has no binary)"
                    )));
                }
            }
            "shim" => {
                shim_binary_name(&r.runtime_type)
                    .map_err(|e| ConfigError(format!("{key}.runtime_type: {e}")))?;
                if !r.path.is_empty() && !r.path.starts_with('/') {
                    return Err(ConfigError(format!(
                        "{key}.path: {:?} must be an absolute path (a shim's binary; empty: \
                         the one runtime_type names, on PATH)",
                        r.path
                    )));
                }
                if let RuntimeOptions::Flags(f) = &r.options {
                    if !f.is_empty() {
                        return Err(ConfigError(format!(
                            "{key}.options: a shim's options are a table (as \
                             [runtimes.{name}.options] BinaryName = \"runc\"), not flags"
                        )));
                    }
                }
                let set = [
                    ("root", !r.root.is_empty()),
                    ("no_pivot_root", r.no_pivot_root),
                ];
                if let Some((k, _)) = set.iter().find(|(_, on)| *on) {
                    return Err(ConfigError(format!(
                        "{key}.{k}: only for type \"oci\" (a shim takes it in its options)"
                    )));
                }
            }
            "oci" => {
                if let RuntimeOptions::Table(_) = &r.options {
                    return Err(ConfigError(format!(
                        "{key}.options: an OCI runtime's options are its global flags, a list"
                    )));
                }
                if !r.runtime_type.is_empty() {
                    return Err(ConfigError(format!(
                        "{key}.runtime_type: only for type \"shim\""
                    )));
                }
                if r.path.trim().is_empty() {
                    return Err(ConfigError(format!(
                        "{key}.path: type \"oci\" needs the runtime's binary"
                    )));
                }
                if !r.root.is_empty() && !r.root.starts_with('/') {
                    return Err(ConfigError(format!(
                        "{key}.root: {:?} must be an absolute path",
                        r.root
                    )));
                }
            }
            other => {
                return Err(ConfigError(format!(
                    "{key}.type: {other:?} is not \"husk\", \"oci\" or \"shim\""
                )))
            }
        }
        if r.timeout_secs == 0 || r.timeout_secs > MAX_TIMEOUT_SECS {
            return Err(ConfigError(format!(
                "{key}.timeout_secs: must be 1 to {MAX_TIMEOUT_SECS}"
            )));
        }
        if let Some(p) = r.pod_annotations.iter().find(|p| p.is_empty()) {
            return Err(ConfigError(format!(
                "{key}.pod_annotations: {p:?} is not an annotation name or pattern"
            )));
        }
    }
    if !runtimes.contains_key(default_runtime) {
        let names: Vec<&String> = runtimes.keys().collect();
        return Err(ConfigError(format!(
            "default_runtime: {default_runtime:?} is not a configured handler ({names:?})"
        )));
    }
    Ok(())
}

/// Whether annotation `name` matches `pattern` (`*`: any run).
pub fn matches(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == name;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !name.starts_with(first) || name.len() < first.len() + last.len() {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    if !name.ends_with(last) {
        return false;
    }
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}

/// The `[runtimes.*]` tables as documented TOML.
pub fn to_toml(runtimes: &BTreeMap<String, RuntimeConfig>) -> String {
    let mut out = String::new();
    for (name, r) in runtimes {
        out += &format!("\n[runtimes.{name}]\n");
        out += &format!("type = {:?}\n", r.kind);
        if r.is_oci() {
            let opts: Vec<String> = r.options.flags().iter().map(|o| format!("{o:?}")).collect();
            out += &format!("path = {:?}\n", r.path);
            out += &format!("root = {:?}\n", r.root);
            out += &format!("options = [{}]\n", opts.join(", "));
            out += &format!("no_pivot_root = {}\n", r.no_pivot_root);
        }
        if r.is_shim() {
            out += &format!("runtime_type = {:?}\n", r.runtime_type);
            out += &format!("path = {:?}\n", r.path);
        }
        let ann: Vec<String> = r.pod_annotations.iter().map(|o| format!("{o:?}")).collect();
        out += &format!(
            "privileged_without_host_devices = {}\n",
            r.privileged_without_host_devices
        );
        out += &format!("pod_annotations = [{}]\n", ann.join(", "));
        out += &format!("timeout_secs = {}\n", r.timeout_secs);
        if r.is_shim() && !r.options.is_empty() {
            out += &format!("\n[runtimes.{name}.options]\n");
            out += &toml::to_string(&r.options.table()).unwrap_or_default();
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_as_globs() {
        assert!(matches("io.katacontainers.*", "io.katacontainers.config.x"));
        assert!(matches("*", "anything"));
        assert!(matches("a*c*e", "abcde"));
        assert!(matches("exact", "exact"));
        assert!(!matches("exact", "exactly"));
        assert!(!matches("a*c", "ab"));
        assert!(!matches("io.x.*", "io.y.z"));
    }

    #[test]
    fn bad_handlers_are_named() {
        let mut r = defaults();
        r.insert(
            "gvisor".into(),
            RuntimeConfig {
                kind: "oci".into(),
                ..Default::default()
            },
        );
        let e = validate(&r, "husk").expect_err("no path");
        assert!(e.0.starts_with("runtimes.gvisor.path:"), "{}", e.0);
        let mut r = defaults();
        r.insert("Bad_Name".into(), RuntimeConfig::default());
        assert!(validate(&r, "husk").is_err());
        let e = validate(&defaults(), "crun").expect_err("unknown default");
        assert!(
            e.0.contains("\"husk\"") && e.0.contains("\"runc\""),
            "{}",
            e.0
        );
        let mut r = defaults();
        r.get_mut("husk").expect("husk").path = "/bin/true".into();
        let e = validate(&r, "husk").expect_err("path on husk");
        assert!(e.0.starts_with("runtimes.husk.path:"), "{}", e.0);
        let mut r = defaults();
        r.get_mut("runc").expect("runc").kind = "vm".into();
        assert!(validate(&r, "husk").expect_err("type").0.contains("\"vm\""));
    }
}
