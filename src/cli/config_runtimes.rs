//! containerd's `runtimes.<name>` tables as husk runtime handlers: a
//! runtime run by containerd's runc shim (`io.containerd.runc.v2`, or the
//! old `.v1`) is an OCI runtime husk's shim drives the same way, its
//! `BinaryName` (default runc) and `Root` kept. Other shims (Kata's,
//! gVisor's containerd shim) are not OCI command lines and are left out,
//! with why.

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
    if !matches!(kind, "io.containerd.runc.v2" | "io.containerd.runc.v1") {
        return Err(format!(
            "runtime_type {kind:?} is a containerd shim, not an OCI runtime's command line; \
             husk drives runtimes that speak runc's (runc, crun, runsc): add a \
             [runtimes.{name}] with type = \"oci\" and its binary"
        ));
    }
    let valid = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !valid {
        return Err("a husk handler name must be a DNS label (a-z, 0-9, '-')".into());
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
        options: Vec::new(),
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
        let kata: Value =
            toml::from_str(r#"runtime_type = "io.containerd.kata.v2""#).expect("toml");
        assert!(convert("kata", &kata, false)
            .expect_err("a shim")
            .contains("containerd shim"));
    }
}
