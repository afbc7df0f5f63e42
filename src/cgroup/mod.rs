//! cgroups, for the pause and for containers alike: where the hierarchy is
//! (`layout.rs`) and where a cgroups path is in it (`paths.rs`), what a
//! cgroup reports (`usage.rs`), how its processes are killed and it is
//! removed (`kill.rs`), live resource changes (`resources.rs`), and, in
//! this file, OOM counts and the controllers delegated to pods. Neither
//! the sandbox nor the container room owns them.
//!
//! The layout is found once, from `/proc/self/mountinfo`: when a cgroup2
//! file system is mounted at `/sys/fs/cgroup` the host is unified (v2) and
//! a cgroups path `/a/b` is `/sys/fs/cgroup/a/b`; otherwise each v1
//! controller has its own mount (`cpu`, `cpuacct`, `memory`, … possibly
//! co-mounted, as `cpu,cpuacct`) and the path is joined to each. A hybrid
//! host (v1 controllers plus an empty cgroup2 at `/sys/fs/cgroup/unified`)
//! is v1, as libcontainer treats it.
//!
//! Reading never fails: a missing file (an exited container whose cgroup is
//! gone, a controller not mounted) leaves that figure unset.
//!
//! Who makes the cgroups, and what a `cgroup_parent` may be, is the
//! driver's (`driver.rs`: cgroupfs or systemd; `systemd.rs` speaks to
//! systemd). Every path here is an OCI cgroups path, either form: a
//! systemd one (`slice:husk:id`) is read at the scope systemd made for it.

pub mod blockio_class;
pub mod driver;
mod kill;
mod layout;
pub mod paths;
pub mod resources;
pub mod systemd;
pub mod usage;
mod validate;

pub use driver::Driver;
pub use kill::{dirs, kill_all, remove};
pub(crate) use layout::oom_kills_in;
use layout::read;
pub use layout::{Layout, LAYOUT_ENV};
pub use usage::{usage, v2_pressure, Cpu, Figures, Memory, Pressure, Psi, Usage};
pub use validate::validate;

use std::path::Path;

/// OOM kills counted in the cgroup at `cgroups_path` (its subtree's, as
/// the kernel counts them): `oom_kill` of `memory.events` on v2, of
/// `memory.oom_control` on v1. None when the cgroup is gone.
pub fn oom_kills(layout: &Layout, cgroups_path: &str) -> Option<u64> {
    let dir = match layout {
        Layout::V1(_) => layout.dir("memory", cgroups_path)?,
        Layout::V2(_) => layout.dir("", cgroups_path)?,
    };
    oom_kills_in(&dir, layout.is_v2())
}

/// On v2, the controllers that cgroups under `parent` can use: those in
/// its `cgroup.subtree_control` once each controller the root has is
/// enabled on the way down (what libcontainer does when it creates the
/// cgroup, done here first so that one that cannot be enabled, under a
/// parent holding processes of its own, is known before a spec is
/// written). Missing parents are made, as libcontainer would make them.
/// None on v1, where each controller is a hierarchy of its own.
pub fn delegate(layout: &Layout, parent: &str) -> Option<Vec<String>> {
    let Layout::V2(root) = layout else {
        return None;
    };
    let wanted: Vec<String> = read(root, "cgroup.controllers")
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let mut dir = root.clone();
    let parts: Vec<&str> = parent
        .split('/')
        .filter(|c| !c.is_empty() && *c != "." && *c != "..")
        .collect();
    for part in parts {
        enable(&dir, &wanted);
        dir.push(part);
        if std::fs::create_dir(&dir).is_err() && !dir.is_dir() {
            return Some(Vec::new());
        }
    }
    enable(&dir, &wanted);
    Some(
        read(&dir, "cgroup.subtree_control")
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_string)
            .collect(),
    )
}

/// Enables each of `controllers` not yet in `dir`'s
/// `cgroup.subtree_control` (one write each: the kernel refuses a whole
/// line if one controller in it cannot be enabled).
fn enable(dir: &Path, controllers: &[String]) {
    let have = read(dir, "cgroup.subtree_control").unwrap_or_default();
    for c in controllers {
        if !have.split_whitespace().any(|h| h == c) {
            let _ = std::fs::write(dir.join("cgroup.subtree_control"), format!("+{c}"));
        }
    }
}

/// The controllers a scope under the slice at `parent` gets: those
/// systemd enables for its units, and any the slice (made by a kubelet
/// that enables every controller) already passes down.
fn systemd_reachable(layout: &Layout, parent: &str) -> Option<Vec<String>> {
    let Layout::V2(root) = layout else {
        return None;
    };
    let slice = read(
        &root.join(parent.trim_start_matches('/')),
        "cgroup.subtree_control",
    )
    .unwrap_or_default();
    Some(
        read(root, "cgroup.controllers")
            .unwrap_or_default()
            .split_whitespace()
            .filter(|c| {
                systemd::ENABLED_BY_SYSTEMD.contains(c) || slice.split_whitespace().any(|s| s == *c)
            })
            .map(str::to_string)
            .collect(),
    )
}

/// A v2 controller as `husk check` reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct Controller {
    pub name: String,
    /// Enabled in the root's `cgroup.subtree_control` (delegated to the
    /// cgroups below); libcontainer enables it on the way down otherwise.
    pub delegated: bool,
}

/// The controllers of the unified hierarchy at `root` (v2 only).
pub fn v2_controllers(root: &Path) -> Vec<Controller> {
    let enabled = read(root, "cgroup.subtree_control").unwrap_or_default();
    read(root, "cgroup.controllers")
        .unwrap_or_default()
        .split_whitespace()
        .map(|c| Controller {
            name: c.to_string(),
            delegated: enabled.split_whitespace().any(|e| e == c),
        })
        .collect()
}

/// Drops the limits of `res` that need a controller the host lacks, as
/// runc and containerd do (the kubelet sends hugepage limits for every page
/// size the node has, whether or not the hugetlb controller exists). Each
/// controller skipped is logged once per process; the names are returned.
/// On v2 a controller counts when the parent of the container at
/// `cgroups_path` delegates it to its children ([`delegate`]); under
/// systemd, when systemd enables it for scopes or the pod's slice already
/// has it.
pub fn prune_unsupported(
    layout: &Layout,
    cgroups_path: &str,
    res: &mut crate::api::cri::LinuxContainerResources,
) -> Vec<&'static str> {
    let parent = paths::parent_fs_path(cgroups_path);
    let delegated = if systemd::unit_of(cgroups_path).is_some() {
        systemd_reachable(layout, &parent)
    } else {
        delegate(layout, &parent)
    };
    let has = |c: &str| match &delegated {
        Some(d) => d.iter().any(|x| x == c),
        None => layout.has(c),
    };
    let mut skipped = Vec::new();
    if !res.hugepage_limits.is_empty() && !has("hugetlb") {
        res.hugepage_limits.clear();
        skipped.push("hugetlb");
    }
    if (!res.cpuset_cpus.is_empty() || !res.cpuset_mems.is_empty()) && !has("cpuset") {
        res.cpuset_cpus.clear();
        res.cpuset_mems.clear();
        skipped.push("cpuset");
    }
    if (res.cpu_shares > 0 || res.cpu_quota > 0 || res.cpu_period > 0) && !has("cpu") {
        res.cpu_shares = 0;
        res.cpu_quota = 0;
        res.cpu_period = 0;
        skipped.push("cpu");
    }
    if (res.memory_limit_in_bytes > 0 || res.memory_swap_limit_in_bytes > 0) && !has("memory") {
        res.memory_limit_in_bytes = 0;
        res.memory_swap_limit_in_bytes = 0;
        skipped.push("memory");
    }
    static LOGGED: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    let mut logged = LOGGED.lock().unwrap_or_else(|p| p.into_inner());
    for c in &skipped {
        if !logged.contains(c) {
            logged.push(c);
            tracing::warn!(
                controller = c,
                "the {c} cgroup controller is not available to pods here: its limits are skipped"
            );
        }
    }
    skipped
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    const HYBRID: &str = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw";

    #[test]
    fn hybrid_is_v1_with_comounted_controllers() {
        let l = Layout::from_mountinfo(HYBRID);
        assert!(!l.is_v2());
        assert_eq!(
            l.dir("cpuacct", "/pods/c1"),
            Some(PathBuf::from("/sys/fs/cgroup/cpu,cpuacct/pods/c1"))
        );
        assert_eq!(
            l.dir("memory", "pods/c1"),
            Some(PathBuf::from("/sys/fs/cgroup/memory/pods/c1"))
        );
        assert_eq!(l.dir("pids", "/pods/c1"), None);
    }

    #[test]
    fn a_layout_handed_down_is_the_layout_found() {
        let l = Layout::from_mountinfo(HYBRID);
        let back = Layout::decode(&l.encode()).expect("decodes");
        assert_eq!(back.encode(), l.encode());
        assert_eq!(back.dir("cpuacct", "/p"), l.dir("cpuacct", "/p"));
        let v2 = Layout::V2(PathBuf::from("/sys/fs/cgroup"));
        assert!(Layout::decode(&v2.encode()).expect("decodes").is_v2());
        for bad in ["", "v3:x", "v2:", "v1:cpu"] {
            assert!(Layout::decode(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn limits_of_missing_controllers_are_pruned() {
        let l = Layout::from_mountinfo(HYBRID);
        let mut r = crate::api::cri::LinuxContainerResources {
            cpu_shares: 2,
            memory_limit_in_bytes: 1 << 20,
            cpuset_cpus: "0".into(),
            hugepage_limits: vec![crate::api::cri::HugepageLimit {
                page_size: "2MB".into(),
                limit: 0,
            }],
            ..Default::default()
        };
        assert_eq!(prune_unsupported(&l, "/p/c", &mut r), ["hugetlb", "cpuset"]);
        assert!(r.hugepage_limits.is_empty() && r.cpuset_cpus.is_empty());
        assert_eq!((r.cpu_shares, r.memory_limit_in_bytes), (2, 1 << 20));
        assert!(prune_unsupported(&l, "/p/c", &mut r).is_empty());
    }

    #[test]
    fn a_scope_gets_what_systemd_enables_and_what_its_slice_passes_down() {
        let d = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            d.path().join("cgroup.controllers"),
            "cpu memory pids hugetlb\n",
        )
        .expect("w");
        let slice = d.path().join("a.slice");
        std::fs::create_dir(&slice).expect("mkdir");
        std::fs::write(slice.join("cgroup.subtree_control"), "cpu memory\n").expect("w");
        let l = Layout::V2(d.path().to_path_buf());
        let huge = || crate::api::cri::LinuxContainerResources {
            memory_limit_in_bytes: 1 << 20,
            hugepage_limits: vec![crate::api::cri::HugepageLimit {
                page_size: "2MB".into(),
                limit: 0,
            }],
            ..Default::default()
        };
        let mut r = huge();
        assert_eq!(prune_unsupported(&l, "a.slice:husk:c", &mut r), ["hugetlb"]);
        assert_eq!(r.memory_limit_in_bytes, 1 << 20);
        // A slice the kubelet made passes hugetlb down; nothing was made.
        std::fs::write(slice.join("cgroup.subtree_control"), "cpu memory hugetlb\n").expect("w");
        let mut r = huge();
        assert!(prune_unsupported(&l, "a.slice:husk:c", &mut r).is_empty());
        assert!(!slice.join("husk-c.scope").exists());
    }

    #[test]
    fn v2_controllers_say_what_is_delegated() {
        let d = tempfile::tempdir().expect("tempdir");
        std::fs::write(d.path().join("cgroup.controllers"), "cpu memory pids\n").expect("w");
        std::fs::write(d.path().join("cgroup.subtree_control"), "memory\n").expect("w");
        let c = v2_controllers(d.path());
        assert_eq!(
            c.iter()
                .map(|c| (c.name.as_str(), c.delegated))
                .collect::<Vec<_>>(),
            [("cpu", false), ("memory", true), ("pids", false)]
        );
    }

    #[test]
    fn unified_is_v2() {
        let l = Layout::from_mountinfo(
            "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate",
        );
        assert!(l.is_v2());
        assert_eq!(
            l.dir("memory", "/kubepods/pod1/c1"),
            Some(PathBuf::from("/sys/fs/cgroup/kubepods/pod1/c1"))
        );
    }
}
