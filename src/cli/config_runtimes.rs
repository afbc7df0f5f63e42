//! containerd's `runtimes.<name>` tables as husk runtime handlers: a
//! runtime run by containerd's runc shim (`io.containerd.runc.v2`, or the
//! old `.v1`) is an OCI runtime husk's shim drives the same way, its
//! `BinaryName` (default runc) and `Root` kept. Any other shim (Kata's,
//! gVisor's, runwasi's) becomes a `type = "shim"` handler with the same
//! `runtime_type`, `runtime_path` and options table.

use crate::config::runtimes::RuntimeOptions;
use crate::config::RuntimeConfig;
use toml::Value;

fn strings(t: &Value, k: &str) -> Vec<String> {
    t.get(k)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// One `runtimes.<name>` table (`systemd`: the driver the import chose);
/// the handler and notes on what did not carry, or why it cannot.
pub fn convert(
    name: &str,
    t: &Value,
    systemd: bool,
) -> Result<(RuntimeConfig, Vec<String>), String> {
    let kind = t
        .get("runtime_type")
        .and_then(Value::as_str)
        .unwrap_or("io.containerd.runc.v2");
    let valid = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !valid {
        return Err("a husk handler name must be a DNS label (a-z, 0-9, '-')".into());
    }
    if !matches!(kind, "io.containerd.runc.v2" | "io.containerd.runc.v1") {
        return shim(kind, t);
    }
    let opts = t.get("options");
    let opt = |k: &str| opts.and_then(|o| o.get(k));
    let mut notes = Vec::new();
    if let Some(s) = opt("SystemdCgroup").and_then(Value::as_bool) {
        if s != systemd {
            notes.push(format!(
                "options.SystemdCgroup = {s}: husk has one cgroup driver for every handler \
                 (cgroup.driver)"
            ));
        }
    }
    if opt("CriuPath").is_some() || opt("CriuImagePath").is_some() {
        notes.push("the CRIU options: husk does not checkpoint".into());
    }
    if t.get("container_annotations").is_some() {
        notes.push(
            "container_annotations: a container's own annotations always reach its spec".into(),
        );
    }
    let h = RuntimeConfig {
        kind: "oci".into(),
        path: opt("BinaryName")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .unwrap_or("runc")
            .into(),
        root: opt("Root").and_then(Value::as_str).unwrap_or("").into(),
        no_pivot_root: opt("NoPivotRoot").and_then(Value::as_bool).unwrap_or(false),
        privileged_without_host_devices: t
            .get("privileged_without_host_devices")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        pod_annotations: strings(t, "pod_annotations"),
        ..RuntimeConfig::default()
    };
    Ok((h, notes))
}

/// A shim other than runc's: a `type = "shim"` handler.
fn shim(kind: &str, t: &Value) -> Result<(RuntimeConfig, Vec<String>), String> {
    crate::config::runtimes::shim_binary_name(kind)?;
    let mut notes = Vec::new();
    let path = t.get("runtime_path").and_then(Value::as_str).unwrap_or("");
    if !path.is_empty() && !path.starts_with('/') {
        return Err(format!("runtime_path {path:?} must be absolute"));
    }
    if t.get("container_annotations").is_some() {
        notes.push(
            "container_annotations: a container's own annotations always reach its spec".into(),
        );
    }
    if t.get("sandboxer").and_then(Value::as_str) == Some("shim") {
        notes.push(
            "sandboxer = \"shim\": husk runs a pod's sandbox as a task of the shim \
             (containerd's \"podsandbox\")"
                .into(),
        );
    }
    let options = match t.get("options").and_then(Value::as_table) {
        Some(o) => RuntimeOptions::Table(o.clone()),
        None => RuntimeOptions::default(),
    };
    let h = RuntimeConfig {
        kind: "shim".into(),
        runtime_type: kind.into(),
        path: path.into(),
        options,
        privileged_without_host_devices: t
            .get("privileged_without_host_devices")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        pod_annotations: strings(t, "pod_annotations"),
        ..RuntimeConfig::default()
    };
    Ok((h, notes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runc_shim_runtimes_become_oci_handlers() {
        let t: Value = toml::from_str(
            r#"runtime_type = "io.containerd.runc.v2"
privileged_without_host_devices = true
pod_annotations = ["io.kubernetes.cri.*"]
[options]
BinaryName = "/usr/bin/crun"
Root = "/run/crun"
SystemdCgroup = true"#,
        )
        .expect("toml");
        let (h, notes) = convert("crun", &t, false).expect("converts");
        assert_eq!(h.path, "/usr/bin/crun");
        assert_eq!(h.root, "/run/crun");
        assert!(h.privileged_without_host_devices);
        assert_eq!(h.pod_annotations, ["io.kubernetes.cri.*"]);
        assert!(notes[0].contains("SystemdCgroup"), "{notes:?}");
    }

    #[test]
    fn other_shims_become_shim_handlers_with_their_options() {
        let kata: Value = toml::from_str(
            r#"runtime_type = "io.containerd.kata.v2"
runtime_path = "/opt/kata/bin/containerd-shim-kata-v2"
pod_annotations = ["io.katacontainers.*"]
[options]
ConfigPath = "/opt/kata/share/defaults/kata-containers/configuration.toml""#,
        )
        .expect("toml");
        let (h, _) = convert("kata", &kata, false).expect("converts");
        assert!(h.is_shim());
        assert_eq!(h.runtime_type, "io.containerd.kata.v2");
        assert_eq!(h.path, "/opt/kata/bin/containerd-shim-kata-v2");
        assert_eq!(h.pod_annotations, ["io.katacontainers.*"]);
        assert_eq!(
            h.options.table()["ConfigPath"].as_str(),
            Some("/opt/kata/share/defaults/kata-containers/configuration.toml")
        );
        let bad: Value = toml::from_str(r#"runtime_type = "wasm""#).expect("toml");
        assert!(convert("wasm", &bad, false)
            .expect_err("no shim name")
            .contains("runtime_type"));
    }
}
