//! What CDI edits do to a container's OCI spec (JSON), as the reference
//! implementation applies them: each spec's own edits once, then each
//! device's, in the order asked.
//!
//! - `env`: set, replacing a variable of the same name.
//! - `deviceNodes`: a `linux.devices` entry (replacing one at the same
//!   path) and a cgroup rule allowing it (`permissions`, default `rwm`);
//!   type, major and minor not given are read from the host node
//!   (`hostPath`, default `path`), which must then exist.
//! - `mounts`: a mount (replacing one at the same destination), `bind`
//!   when no type is given.
//! - `hooks`: appended to the named OCI hook list.
//! - `additionalGIDs`: added to the process's supplementary groups.

use super::spec::{DeviceNode, Edits, Found};
use serde_json::{json, Value};
use std::collections::HashSet;

/// Applies the edits of `found` to `spec`.
pub fn apply(spec: &mut Value, found: &[Found]) -> Result<(), String> {
    let mut specs_done = HashSet::new();
    for f in found {
        if specs_done.insert(f.file.clone()) {
            edit(spec, &f.spec_edits).map_err(|e| format!("CDI spec {}: {e}", f.file.display()))?;
        }
        edit(spec, &f.edits)
            .map_err(|e| format!("CDI device {:?} of {}: {e}", f.name, f.file.display()))?;
    }
    Ok(())
}

/// `v[key]` as an array, made if absent.
fn array<'a>(v: &'a mut Value, key: &str) -> &'a mut Vec<Value> {
    if !v[key].is_array() {
        v[key] = json!([]);
    }
    match v[key].as_array_mut() {
        Some(a) => a,
        None => unreachable!("just made an array"),
    }
}

fn edit(spec: &mut Value, e: &Edits) -> Result<(), String> {
    let env = array(&mut spec["process"], "env");
    for kv in &e.env {
        let key = kv.split('=').next().unwrap_or(kv);
        env.retain(|x| x.as_str().and_then(|s| s.split('=').next()) != Some(key));
        env.push(json!(kv));
    }
    for d in &e.device_nodes {
        let (node, rule) = node(d)?;
        let devices = array(&mut spec["linux"], "devices");
        devices.retain(|x| x["path"] != json!(d.path));
        devices.push(node);
        if let Some(rule) = rule {
            array(&mut spec["linux"]["resources"], "devices").push(rule);
        }
    }
    for m in &e.mounts {
        let mounts = array(spec, "mounts");
        mounts.retain(|x| x["destination"] != json!(m.container_path));
        let kind = if m.kind.is_empty() { "bind" } else { &m.kind };
        let mut options = m.options.clone();
        if kind == "bind" && !options.iter().any(|o| o == "bind" || o == "rbind") {
            options.push("bind".into());
        }
        mounts.push(json!({"destination": m.container_path, "source": m.host_path, "type": kind, "options": options}));
    }
    for h in &e.hooks {
        let mut hook = json!({"path": h.path});
        if !h.args.is_empty() {
            hook["args"] = json!(h.args);
        }
        if !h.env.is_empty() {
            hook["env"] = json!(h.env);
        }
        if let Some(t) = h.timeout {
            hook["timeout"] = json!(t);
        }
        array(&mut spec["hooks"], &h.hook_name).push(hook);
    }
    let gids = array(&mut spec["process"]["user"], "additionalGids");
    for g in &e.additional_gids {
        if !gids.contains(&json!(g)) {
            gids.push(json!(g));
        }
    }
    Ok(())
}

/// A device node's OCI entry and cgroup rule (none for a FIFO).
fn node(d: &DeviceNode) -> Result<(Value, Option<Value>), String> {
    let host = if d.host_path.is_empty() {
        &d.path
    } else {
        &d.host_path
    };
    let (mut kind, mut major, mut minor, mut mode) =
        (d.kind.clone(), d.major, d.minor, d.file_mode);
    if kind.is_empty() || (kind != "p" && (major.is_none() || minor.is_none())) || mode.is_none() {
        match rustix::fs::stat(host.as_str()) {
            Ok(st) => {
                let host_kind = match rustix::fs::FileType::from_raw_mode(st.st_mode) {
                    rustix::fs::FileType::CharacterDevice => "c",
                    rustix::fs::FileType::BlockDevice => "b",
                    rustix::fs::FileType::Fifo => "p",
                    _ => return Err(format!("{host:?} is not a device node")),
                };
                if kind.is_empty() {
                    kind = host_kind.into();
                }
                major = major.or(Some(i64::from(rustix::fs::major(st.st_rdev))));
                minor = minor.or(Some(i64::from(rustix::fs::minor(st.st_rdev))));
                mode = mode.or(Some(st.st_mode & 0o777));
            }
            // Given whole, the host node need not exist.
            Err(_) if !kind.is_empty() && major.is_some() && minor.is_some() => {}
            Err(e) => return Err(format!("device node {host:?}: {e}")),
        }
    }
    let kind = if kind == "u" { "c".to_string() } else { kind };
    let mut n = json!({"path": d.path, "type": kind, "major": major.unwrap_or(0), "minor": minor.unwrap_or(0)});
    if let Some(m) = mode {
        n["fileMode"] = json!(m);
    }
    if let Some(u) = d.uid {
        n["uid"] = json!(u);
    }
    if let Some(g) = d.gid {
        n["gid"] = json!(g);
    }
    let access = if d.permissions.is_empty() {
        "rwm"
    } else {
        d.permissions.as_str()
    };
    let rule = (kind != "p").then(
        || json!({"allow": true, "type": kind, "major": major, "minor": minor, "access": access}),
    );
    Ok((n, rule))
}

#[cfg(test)]
mod tests {
    use super::super::spec::{Hook, Mount};
    use super::*;

    #[test]
    fn edits_land_where_the_runtime_reads_them() {
        let mut spec = json!({"process": {"env": ["PATH=/bin", "A=old"], "user": {"uid": 0, "gid": 0, "additionalGids": [0]}},
                              "mounts": [], "linux": {"devices": [], "resources": {"devices": [{"allow": false, "access": "rwm"}]}}});
        let shared = Edits {
            env: vec!["SHARED=1".into()],
            ..Default::default()
        };
        let own = Edits {
            env: vec!["A=new".into()],
            device_nodes: vec![DeviceNode {
                path: "/dev/cdi-null".into(),
                host_path: "/dev/null".into(),
                ..Default::default()
            }],
            mounts: vec![Mount {
                host_path: "/etc/hostname".into(),
                container_path: "/etc/vendor".into(),
                options: vec!["ro".into()],
                ..Default::default()
            }],
            hooks: vec![Hook {
                hook_name: "createContainer".into(),
                path: "/usr/bin/vendor-hook".into(),
                args: vec!["vendor-hook".into(), "x".into()],
                ..Default::default()
            }],
            additional_gids: vec![44, 0],
            ..Default::default()
        };
        let f = |name: &str| Found {
            file: "/etc/cdi/v.json".into(),
            name: name.into(),
            spec_edits: shared.clone(),
            edits: own.clone(),
        };
        apply(&mut spec, &[f("a"), f("b")]).expect("apply");
        assert_eq!(
            spec["process"]["env"],
            json!(["PATH=/bin", "SHARED=1", "A=new"])
        );
        assert_eq!(
            spec["linux"]["devices"],
            json!([{"path": "/dev/cdi-null", "type": "c", "major": 1, "minor": 3, "fileMode": 0o666}])
        );
        assert_eq!(
            spec["linux"]["resources"]["devices"][1],
            json!({"allow": true, "type": "c", "major": 1, "minor": 3, "access": "rwm"})
        );
        assert_eq!(
            spec["mounts"],
            json!([{"destination": "/etc/vendor", "source": "/etc/hostname", "type": "bind", "options": ["ro", "bind"]}])
        );
        assert_eq!(
            spec["hooks"]["createContainer"].as_array().map(Vec::len),
            Some(2)
        );
        assert_eq!(spec["process"]["user"]["additionalGids"], json!([0, 44]));
        let missing = Edits {
            device_nodes: vec![DeviceNode {
                path: "/dev/not-there-at-all".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let e = apply(
            &mut spec,
            &[Found {
                edits: missing,
                ..f("c")
            }],
        )
        .expect_err("missing node");
        assert!(e.contains("not-there-at-all"), "{e}");
    }
}
