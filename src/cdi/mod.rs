//! CDI devices (Container Device Interface): a container's
//! `cdi_devices` and its `cdi.k8s.io/*` annotations (what the kubelet
//! sends for Dynamic Resource Allocation and CDI device plugins) resolved
//! against the spec files of the configured dirs and applied to its OCI
//! spec, under every handler.
//!
//! Invariants:
//! - A container never starts without a device it asked for: a name that
//!   resolves to no spec, a spec file that does not parse or check, and a
//!   device two files of one dir both define are InvalidArgument naming
//!   them. Nothing is read, and nothing can fail, for a container that
//!   asks for no device.
//! - Spec dirs are read in order (default `/etc/cdi`, then `/var/run/cdi`);
//!   a device defined in a later dir overrides an earlier one (the dynamic
//!   specs of `/var/run/cdi` win, as in the reference implementation).
//! - The files are read at each request that asks for a device: a spec
//!   written by a device plugin or a DRA driver a moment ago is seen.
//!
//! Spec files: `spec.rs`; what an edit does to the OCI spec: `apply.rs`.
//! The reference Rust library (`container-device-interface`) is not used:
//! its JSON-schema dependency brings an HTTP client and a TLS library with
//! a C build into a static runtime that never fetches a schema.

mod apply;
pub mod spec;

pub use apply::apply;
pub use spec::Found;

use crate::api::cri::ContainerConfig;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The annotation prefix of CDI device requests.
pub const ANNOTATION_PREFIX: &str = "cdi.k8s.io/";

/// The qualified device names (`vendor/class=name`) a container asks for,
/// in order, each once: its `cdi_devices`, then its `cdi.k8s.io/*`
/// annotations (comma-separated names, in key order).
pub fn requested(c: &ContainerConfig) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let annotations: BTreeMap<&String, &String> = c
        .annotations
        .iter()
        .filter(|(k, _)| k.starts_with(ANNOTATION_PREFIX))
        .collect();
    let names = c
        .cdi_devices
        .iter()
        .map(|d| d.name.trim().to_string())
        .chain(
            annotations
                .values()
                .flat_map(|v| v.split(','))
                .map(|s| s.trim().to_string()),
        )
        .filter(|s| !s.is_empty());
    for n in names {
        if !out.contains(&n) {
            out.push(n);
        }
    }
    out
}

/// Splits `vendor/class=name`, each part checked.
fn split(qualified: &str) -> Result<(&str, &str), String> {
    let (kind, name) = qualified.split_once('=').ok_or_else(|| {
        format!("{qualified:?} is not a qualified CDI device name (vendor.com/class=name)")
    })?;
    spec::check_kind(kind).map_err(|e| format!("{qualified:?}: {e}"))?;
    spec::check_device_name(name).map_err(|e| format!("{qualified:?}: {e}"))?;
    Ok((kind, name))
}

/// The spec files of `dir`, in lexical order.
fn spec_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.is_file()
                && matches!(
                    p.extension().and_then(|e| e.to_str()),
                    Some("json" | "yaml" | "yml")
                )
        })
        .collect();
    v.sort();
    v
}

/// Resolves `names` against the spec files of `dirs` (lowest priority
/// first); the devices in the order asked.
pub fn resolve(dirs: &[PathBuf], names: &[String]) -> Result<Vec<Found>, String> {
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let wanted: Vec<(&str, &str)> = names.iter().map(|n| split(n)).collect::<Result<_, _>>()?;
    let mut broken = Vec::new();
    // Qualified name → what defines it, at the highest priority so far.
    let mut table: BTreeMap<String, (usize, Found)> = BTreeMap::new();
    for (prio, dir) in dirs.iter().enumerate() {
        for file in spec_files(dir) {
            let s = match spec::read(&file) {
                Ok(s) => s,
                Err(e) => {
                    broken.push(format!("{}: {e}", file.display()));
                    continue;
                }
            };
            for d in &s.devices {
                let q = format!("{}={}", s.kind, d.name);
                if let Some((p, other)) = table.get(&q) {
                    if *p == prio {
                        return Err(format!(
                            "CDI device {q} is defined by both {} and {}",
                            other.file.display(),
                            file.display()
                        ));
                    }
                }
                table.insert(
                    q,
                    (
                        prio,
                        Found {
                            file: file.clone(),
                            name: d.name.clone(),
                            spec_edits: s.container_edits.clone(),
                            edits: d.container_edits.clone(),
                        },
                    ),
                );
            }
        }
    }
    if !broken.is_empty() {
        return Err(format!(
            "CDI spec files that cannot be read: {}",
            broken.join("; ")
        ));
    }
    let mut out = Vec::new();
    let mut missing = Vec::new();
    for ((kind, name), q) in wanted.iter().zip(names) {
        match table.get(&format!("{kind}={name}")) {
            Some((_, f)) => out.push(f.clone()),
            None => missing.push(q.as_str()),
        }
    }
    if !missing.is_empty() {
        let dirs: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        return Err(format!(
            "unresolvable CDI devices {} (no spec in {} defines them)",
            missing.join(", "),
            dirs.join(", ")
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::cri::CdiDevice;

    fn spec(kind: &str, devices: &[&str], env: &str) -> String {
        let d: Vec<String> = devices
            .iter()
            .map(|n| format!(r#"{{"name":"{n}","containerEdits":{{"env":["{env}"]}}}}"#))
            .collect();
        format!(
            r#"{{"cdiVersion":"0.6.0","kind":"{kind}","devices":[{}]}}"#,
            d.join(",")
        )
    }

    #[test]
    fn requests_come_from_the_field_and_annotations() {
        let c = ContainerConfig {
            cdi_devices: vec![CdiDevice {
                name: "a.com/x=1".into(),
            }],
            annotations: [
                (
                    "cdi.k8s.io/dra".to_string(),
                    "a.com/x=2, a.com/x=1".to_string(),
                ),
                ("other".to_string(), "b.com/y=1".to_string()),
            ]
            .into(),
            ..Default::default()
        };
        assert_eq!(requested(&c), ["a.com/x=1", "a.com/x=2"]);
    }

    #[test]
    fn later_dirs_win_and_one_dir_cannot_define_twice() {
        let d = tempfile::tempdir().expect("tempdir");
        let (etc, run) = (d.path().join("etc"), d.path().join("run"));
        std::fs::create_dir_all(&etc).expect("mkdir");
        std::fs::create_dir_all(&run).expect("mkdir");
        std::fs::write(etc.join("a.json"), spec("a.com/x", &["1", "2"], "FROM=etc")).expect("w");
        std::fs::write(run.join("a.yaml"), spec("a.com/x", &["1"], "FROM=run")).expect("w");
        let dirs = vec![etc.clone(), run.clone()];
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let f = resolve(&dirs, &names(&["a.com/x=1", "a.com/x=2"])).expect("resolve");
        assert_eq!(f[0].edits.env, ["FROM=run"]);
        assert_eq!(f[1].edits.env, ["FROM=etc"]);
        let e = resolve(&dirs, &names(&["a.com/x=3", "b.com/y=1"])).expect_err("missing");
        assert!(e.contains("a.com/x=3, b.com/y=1"), "{e}");
        assert!(resolve(&dirs, &names(&["nonsense"]))
            .expect_err("bad")
            .contains("qualified"));
        std::fs::write(run.join("b.json"), spec("a.com/x", &["1"], "FROM=b")).expect("w");
        let e = resolve(&dirs, &names(&["a.com/x=2"])).expect_err("conflict");
        assert!(e.contains("a.yaml") && e.contains("b.json"), "{e}");
        std::fs::remove_file(run.join("b.json")).expect("rm");
        std::fs::write(run.join("c.json"), "{").expect("w");
        let e = resolve(&dirs, &names(&["a.com/x=2"])).expect_err("broken");
        assert!(e.contains("c.json"), "{e}");
        assert!(resolve(&dirs, &[]).expect("none").is_empty());
    }
}
