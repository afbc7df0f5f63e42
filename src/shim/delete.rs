//! A stopped container's delete without libcontainer's cgroup manager.
//!
//! libcontainer 0.7 deletes through a new cgroup manager, and on cgroup v1
//! that manager looks up the mount of every v1 controller it knows by
//! reading `/proc/self/mountinfo`, to the end for each controller the
//! node does not mount. On a node of a thousand pods the table has
//! thousands of lines, and a delete spent most of its time there. The
//! shim knows the node's layout already (handed down by the server), so a
//! stopped container on a cgroupfs path with nothing else to undo has its
//! cgroup removed here, as the manager would: what is left in it killed,
//! the directory removed in every hierarchy. Anything else (a container
//! still running or created, poststop hooks, an RDT group, a systemd
//! scope) goes through libcontainer's delete.

use crate::cgroup::Layout;
use libcontainer::container::{Container, ContainerStatus};
use std::path::Path;

/// Deletes `c` here when nothing but its cgroup and its state are left to
/// remove; None when libcontainer's delete must do it.
pub(super) fn without_scan(c: &Container) -> Option<Result<i32, String>> {
    if c.status() != ContainerStatus::Stopped || c.intel_rdt_dir().is_some() {
        return None;
    }
    let config = c.spec().ok()?;
    if config
        .hooks
        .as_ref()
        .is_some_and(|h| h.poststop().as_ref().is_some_and(|p| !p.is_empty()))
    {
        return None;
    }
    let path = config.cgroup_path.to_str()?;
    if !Path::new(path).is_absolute() {
        return None;
    }
    Some(remove(Layout::host(), path).and_then(|()| {
        std::fs::remove_dir_all(&c.root)
            .map(|()| 0)
            .map_err(|e| format!("remove {}: {e}", c.root.display()))
    }))
}

/// Removes the cgroup at `path` in every hierarchy; an error names what
/// is still there.
fn remove(layout: &Layout, path: &str) -> Result<(), String> {
    crate::cgroup::remove(layout, path);
    let left: Vec<String> = crate::cgroup::dirs(layout, path)
        .into_iter()
        .filter(|d| d.exists())
        .map(|d| d.display().to_string())
        .collect();
    if left.is_empty() {
        Ok(())
    } else {
        Err(format!("could not delete the cgroup: {}", left.join(", ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cgroup_is_removed_in_every_hierarchy_and_a_missing_one_is_fine() {
        let root = tempfile::tempdir().expect("tempdir");
        let (cpu, mem) = (root.path().join("cpu,cpuacct"), root.path().join("memory"));
        let layout = Layout::V1(
            [
                ("cpu".to_string(), cpu.clone()),
                ("cpuacct".to_string(), cpu.clone()),
                ("memory".to_string(), mem.clone()),
            ]
            .into_iter()
            .collect(),
        );
        std::fs::create_dir_all(cpu.join("pods/c1")).expect("cpu dir");
        std::fs::create_dir_all(mem.join("pods/c1")).expect("memory dir");
        assert_eq!(crate::cgroup::dirs(&layout, "/pods/c1").len(), 2);
        assert_eq!(remove(&layout, "/pods/c1"), Ok(()));
        assert!(!cpu.join("pods/c1").exists() && !mem.join("pods/c1").exists());
        assert!(
            cpu.join("pods").exists(),
            "only the container's own dir goes"
        );
        assert_eq!(remove(&layout, "/pods/c1"), Ok(()), "already gone");
    }

    #[test]
    fn a_cgroup_that_cannot_be_removed_is_named() {
        let root = tempfile::tempdir().expect("tempdir");
        let mem = root.path().join("memory");
        let layout = Layout::V1([("memory".to_string(), mem.clone())].into_iter().collect());
        // A plain directory with a file in it cannot be rmdir'd, as a
        // cgroup with a child cannot.
        std::fs::create_dir_all(mem.join("pods/c2")).expect("dir");
        std::fs::write(mem.join("pods/c2/x"), "").expect("file");
        let e = remove(&layout, "/pods/c2").expect_err("left");
        assert!(e.contains("pods/c2"), "{e}");
    }
}
