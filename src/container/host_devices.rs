//! The host's devices, for privileged containers (unless their runtime
//! handler says `privileged_without_host_devices`), as containerd and
//! CRI-O give them: every character and block device under the node's
//! `/dev`, at the same path, with its numbers and mode. The cgroup of a
//! privileged container already allows every device. Not walked: the
//! pseudo-terminals of `/dev/pts` (each container has its own devpts) and
//! the mounts a container gets anyway (`/dev/shm`, `/dev/mqueue`); nor the
//! node's `/dev/console` (a container's is its own terminal); symlinks are
//! not followed.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// Dirs not walked (as containerd skips them, the hidden ones being
/// other managers' state).
const SKIPPED: [&str; 7] = [
    "/dev/pts",
    "/dev/shm",
    "/dev/mqueue",
    "/dev/fd",
    "/dev/.lxc",
    "/dev/.lxd-mounts",
    "/dev/.udev",
];

/// The device nodes under `dev` (the node's `/dev`), as OCI spec entries.
pub fn list(dev: &Path) -> Vec<Value> {
    let mut out = Vec::new();
    let mut todo: Vec<PathBuf> = vec![dev.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                let under = Path::new("/dev").join(p.strip_prefix(dev).unwrap_or(&p));
                if !SKIPPED.iter().any(|s| Path::new(s) == under) {
                    todo.push(p);
                }
                continue;
            }
            if p == dev.join("console") {
                continue;
            }
            let Ok(st) = rustix::fs::lstat(&p) else {
                continue;
            };
            let kind = match rustix::fs::FileType::from_raw_mode(st.st_mode) {
                rustix::fs::FileType::CharacterDevice => "c",
                rustix::fs::FileType::BlockDevice => "b",
                _ => continue,
            };
            let at = Path::new("/dev").join(p.strip_prefix(dev).unwrap_or(&p));
            out.push(json!({
                "path": at,
                "type": kind,
                "major": rustix::fs::major(st.st_rdev),
                "minor": rustix::fs::minor(st.st_rdev),
                "fileMode": st.st_mode & 0o777,
                "uid": st.st_uid,
                "gid": st.st_gid,
            }));
        }
    }
    out.sort_by(|a, b| a["path"].as_str().cmp(&b["path"].as_str()));
    out
}

/// Adds the host's devices to `spec` (those the spec has at the same path
/// already win).
pub fn add(spec: &mut Value) {
    let have: Vec<String> = spec["linux"]["devices"]
        .as_array()
        .map(|d| {
            d.iter()
                .filter_map(|x| x["path"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let mut all: Vec<Value> = spec["linux"]["devices"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for d in list(Path::new("/dev")) {
        if !have.iter().any(|h| Some(h.as_str()) == d["path"].as_str()) {
            all.push(d);
        }
    }
    spec["linux"]["devices"] = Value::Array(all);
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_nodes_devices_are_listed_without_the_pseudo_terminals() {
        let all = super::list(std::path::Path::new("/dev"));
        let null = all
            .iter()
            .find(|d| d["path"] == "/dev/null")
            .expect("/dev/null");
        assert_eq!(
            (null["type"].as_str(), null["major"].as_u64()),
            (Some("c"), Some(1))
        );
        assert_eq!(null["minor"], 3);
        assert!(all
            .iter()
            .all(|d| !d["path"].as_str().unwrap_or("").starts_with("/dev/pts/")));
        let mut spec = serde_json::json!({"linux": {"devices": [
            {"path": "/dev/null", "type": "c", "major": 1, "minor": 7}]}});
        super::add(&mut spec);
        let devs = spec["linux"]["devices"].as_array().expect("devices");
        let nulls: Vec<_> = devs.iter().filter(|d| d["path"] == "/dev/null").collect();
        assert_eq!(nulls.len(), 1);
        assert_eq!(nulls[0]["minor"], 7, "the spec's own entry wins");
        assert!(devs.len() > 1);
    }
}
