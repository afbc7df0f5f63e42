//! The per-pod cgroups (`<cgroup_root>/<qos>/pod<uid>`) are the kubelet's
//! to remove: runtimes create the pod's container cgroups beneath them
//! and remove only those. Removal is rmdir of empty directories, deepest
//! first, in every mounted hierarchy; a non-empty cgroup is left alone.

use crate::kubelet::kit::settings::Settings;
use std::path::{Path, PathBuf};

fn hierarchies() -> Vec<PathBuf> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
    {
        let p = e.path();
        if p.is_dir() && !p.is_symlink() {
            v.push(p);
        }
    }
    // cgroup v2 only: the root itself is the hierarchy.
    if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        v.push(PathBuf::from("/sys/fs/cgroup"));
    }
    v
}

fn rmdir_tree(dir: &Path) {
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                rmdir_tree(&e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// Removes the pod's cgroup (whatever its QoS class was) if empty.
pub fn remove_pod(s: &Settings, uid: &str) {
    if s.cgroup_root.is_empty() || uid.is_empty() {
        return;
    }
    let root = s.cgroup_root.trim_matches('/');
    for h in hierarchies() {
        for qos in ["", "burstable/", "besteffort/"] {
            let d = h.join(format!("{root}/{qos}pod{uid}"));
            if d.exists() {
                rmdir_tree(&d);
            }
        }
    }
}
