//! CDI spec files (the Container Device Interface, cncf-tags): their
//! format, parsed from JSON or YAML, and checked as the reference
//! implementation checks them: a known `cdiVersion` (0.3.0 to 1.1.0), a
//! `kind` of `vendor/class`, device names of letters, digits and `_.:-`,
//! each device defined once, and only edits husk can apply.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;
use std::path::PathBuf;

/// The CDI spec versions read (those the peers' CDI library accepts).
pub const VERSIONS: [&str; 8] = [
    "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0",
];

/// The largest spec file read.
const MAX_SPEC: u64 = 4 << 20;

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    pub cdi_version: String,
    pub kind: String,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    pub devices: Vec<Device>,
    /// Edits applied once when any device of the spec is injected.
    #[serde(default)]
    pub container_edits: Edits,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Device {
    pub name: String,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    #[serde(default)]
    pub container_edits: Edits,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Edits {
    #[serde(default)]
    pub env: Vec<String>,
    #[serde(default)]
    pub device_nodes: Vec<DeviceNode>,
    #[serde(default)]
    pub hooks: Vec<Hook>,
    #[serde(default)]
    pub mounts: Vec<Mount>,
    #[serde(default, rename = "additionalGIDs", alias = "additionalGids")]
    pub additional_gids: Vec<u32>,
    /// Not applied by husk: refused rather than dropped.
    #[serde(default)]
    pub intel_rdt: Option<serde_json::Value>,
    /// Not applied by husk: refused rather than dropped.
    #[serde(default)]
    pub net_devices: Vec<serde_json::Value>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DeviceNode {
    pub path: String,
    #[serde(default)]
    pub host_path: String,
    #[serde(default, rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub major: Option<i64>,
    #[serde(default)]
    pub minor: Option<i64>,
    #[serde(default)]
    pub file_mode: Option<u32>,
    #[serde(default)]
    pub permissions: String,
    #[serde(default)]
    pub uid: Option<u32>,
    #[serde(default)]
    pub gid: Option<u32>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Mount {
    pub host_path: String,
    pub container_path: String,
    #[serde(default, rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub options: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Hook {
    pub hook_name: String,
    pub path: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: Vec<String>,
    #[serde(default)]
    pub timeout: Option<i64>,
}

/// The OCI hook lists a CDI hook may name.
pub const HOOKS: [&str; 6] = [
    "prestart",
    "createRuntime",
    "createContainer",
    "startContainer",
    "poststart",
    "poststop",
];

/// Reads and checks the spec file at `path` (`.json`, `.yaml`, `.yml`).
pub fn read(path: &Path) -> Result<Spec, String> {
    use std::io::Read as _;
    let f = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut text = String::new();
    f.take(MAX_SPEC + 1)
        .read_to_string(&mut text)
        .map_err(|e| e.to_string())?;
    if text.len() as u64 > MAX_SPEC {
        return Err(format!("larger than {MAX_SPEC} bytes"));
    }
    let spec: Spec = match path.extension().and_then(|e| e.to_str()) {
        Some("json") => serde_json::from_str(&text).map_err(|e| e.to_string())?,
        _ => serde_yaml::from_str(&text).map_err(|e| e.to_string())?,
    };
    check(&spec)?;
    Ok(spec)
}

/// Whether `s` is a CDI name: a letter or digit, then letters, digits and
/// `extra`.
fn name_like(s: &str, extra: &str) -> bool {
    let mut c = s.chars();
    c.next().is_some_and(|f| f.is_ascii_alphanumeric())
        && c.all(|ch| ch.is_ascii_alphanumeric() || extra.contains(ch))
}

/// `vendor/class`: a vendor of domain labels, a class name.
pub fn check_kind(kind: &str) -> Result<(), String> {
    let (vendor, class) = kind
        .split_once('/')
        .ok_or_else(|| format!("kind {kind:?} is not vendor/class"))?;
    if !vendor.split('.').all(|l| name_like(l, "-")) || !name_like(class, "_.-") {
        return Err(format!("kind {kind:?} is not vendor/class"));
    }
    Ok(())
}

pub fn check_device_name(name: &str) -> Result<(), String> {
    if name_like(name, "_.:-") {
        Ok(())
    } else {
        Err(format!("device name {name:?} is invalid"))
    }
}

fn check_edits(e: &Edits, at: &str) -> Result<(), String> {
    if e.intel_rdt.is_some() {
        return Err(format!("{at}: intelRdt edits are not supported by husk"));
    }
    if !e.net_devices.is_empty() {
        return Err(format!("{at}: netDevices edits are not supported by husk"));
    }
    for v in &e.env {
        if !v.contains('=') {
            return Err(format!("{at}: env {v:?} is not KEY=VALUE"));
        }
    }
    for d in &e.device_nodes {
        if !d.path.starts_with('/') {
            return Err(format!(
                "{at}: device node path {:?} is not absolute",
                d.path
            ));
        }
        if !matches!(d.kind.as_str(), "" | "b" | "c" | "u" | "p") {
            return Err(format!(
                "{at}: device node {:?} has type {:?}",
                d.path, d.kind
            ));
        }
        if !d.permissions.chars().all(|c| matches!(c, 'r' | 'w' | 'm')) {
            return Err(format!(
                "{at}: device node {:?} has permissions {:?} (of r, w, m)",
                d.path, d.permissions
            ));
        }
    }
    for m in &e.mounts {
        if !m.container_path.starts_with('/') || m.host_path.is_empty() {
            return Err(format!(
                "{at}: mount {:?} -> {:?} needs a host path and an absolute container path",
                m.host_path, m.container_path
            ));
        }
    }
    for h in &e.hooks {
        if !HOOKS.contains(&h.hook_name.as_str()) {
            return Err(format!(
                "{at}: hook name {:?} is not one of {HOOKS:?}",
                h.hook_name
            ));
        }
        if !h.path.starts_with('/') {
            return Err(format!("{at}: hook path {:?} is not absolute", h.path));
        }
    }
    Ok(())
}

fn check(s: &Spec) -> Result<(), String> {
    if !VERSIONS.contains(&s.cdi_version.as_str()) {
        return Err(format!(
            "cdiVersion {:?} is not one of {VERSIONS:?}",
            s.cdi_version
        ));
    }
    check_kind(&s.kind)?;
    check_edits(&s.container_edits, "containerEdits")?;
    if s.devices.is_empty() {
        return Err("no devices".into());
    }
    let mut seen = std::collections::HashSet::new();
    for d in &s.devices {
        check_device_name(&d.name)?;
        if !seen.insert(&d.name) {
            return Err(format!("device {:?} is defined twice", d.name));
        }
        check_edits(&d.container_edits, &format!("device {:?}", d.name))?;
    }
    Ok(())
}

/// A device found: its spec's file, kind and spec-wide edits, and its own.
#[derive(Debug, Clone)]
pub struct Found {
    pub file: PathBuf,
    pub name: String,
    pub spec_edits: Edits,
    pub edits: Edits,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(ext: &str, text: &str) -> Result<Spec, String> {
        let d = tempfile::tempdir().expect("tempdir");
        let p = d.path().join(format!("s.{ext}"));
        std::fs::write(&p, text).expect("write");
        read(&p)
    }

    #[test]
    fn json_and_yaml_specs() {
        let s = parse(
            "json",
            r#"{"cdiVersion":"0.6.0","kind":"example.com/gpu","devices":[{"name":"0",
               "containerEdits":{"deviceNodes":[{"path":"/dev/gpu0","type":"c","major":1,"minor":3}],
               "env":["GPU=0"],"additionalGIDs":[44]}}],
               "containerEdits":{"mounts":[{"hostPath":"/lib/x","containerPath":"/lib/x","options":["ro","bind"]}]}}"#,
        )
        .expect("json");
        assert_eq!(s.devices[0].container_edits.additional_gids, [44]);
        assert_eq!(s.container_edits.mounts[0].container_path, "/lib/x");
        let y = parse(
            "yaml",
            "cdiVersion: 1.0.0\nkind: vendor.io/net\ndevices:\n- name: a-1\n  containerEdits:\n    env: [A=1]\n",
        )
        .expect("yaml");
        assert_eq!(y.devices[0].container_edits.env, ["A=1"]);
    }

    #[test]
    fn bad_specs_say_why() {
        let bad = |text: &str| parse("json", text).expect_err(text);
        assert!(
            bad(r#"{"cdiVersion":"9.9.9","kind":"a.com/b","devices":[{"name":"x"}]}"#)
                .contains("cdiVersion")
        );
        assert!(
            bad(r#"{"cdiVersion":"0.6.0","kind":"nokind","devices":[{"name":"x"}]}"#)
                .contains("vendor/class")
        );
        assert!(bad(
            r#"{"cdiVersion":"0.6.0","kind":"a.com/b","devices":[{"name":"x"},{"name":"x"}]}"#
        )
        .contains("twice"));
        assert!(bad(r#"{"cdiVersion":"0.6.0","kind":"a.com/b","devices":[{"name":"x","containerEdits":{"netDevices":[{}]}}]}"#)
            .contains("netDevices"));
        assert!(bad(r#"{"cdiVersion":"0.6.0","kind":"a.com/b","devices":[{"name":"x","containerEdits":{"hooks":[{"hookName":"later","path":"/h"}]}}]}"#)
            .contains("hook name"));
        assert!(bad("{not json").contains("key must be a string"));
    }
}
