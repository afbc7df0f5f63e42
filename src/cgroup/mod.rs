//! cgroups, for the pause and for containers alike: where the hierarchy is
//! (this file), what a cgroup reports (`usage.rs`), how its processes are
//! killed and it is removed (`kill.rs`), and live resource changes
//! (`resources.rs`). Neither the sandbox nor the container room owns them.
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

pub mod driver;
mod kill;
pub mod resources;
pub mod systemd;
pub mod usage;
mod validate;

pub use driver::Driver;
pub use kill::{kill_all, remove};
pub use usage::{usage, v2_pressure, Cpu, Memory, Pressure, Psi, Usage};
pub use validate::validate;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Where cgroup controllers are mounted.
#[derive(Debug, Clone)]
pub enum Layout {
    /// cgroup v1: mount point by controller name.
    V1(HashMap<String, PathBuf>),
    /// cgroup v2: the unified hierarchy's root.
    V2(PathBuf),
}

impl Layout {
    /// Parses mountinfo text.
    pub fn from_mountinfo(text: &str) -> Layout {
        let mut v1 = HashMap::new();
        let mut unified_root = None;
        for line in text.lines() {
            let Some((left, right)) = line.split_once(" - ") else {
                continue;
            };
            let mount_point = left.split(' ').nth(4).unwrap_or_default();
            let mut r = right.split(' ');
            let fstype = r.next().unwrap_or_default();
            let _source = r.next();
            let opts = r.next().unwrap_or_default();
            match fstype {
                "cgroup2" if mount_point == "/sys/fs/cgroup" => {
                    unified_root = Some(PathBuf::from(mount_point));
                }
                "cgroup" => {
                    for o in opts.split(',') {
                        if matches!(
                            o,
                            "cpu"
                                | "cpuacct"
                                | "cpuset"
                                | "memory"
                                | "pids"
                                | "hugetlb"
                                | "blkio"
                                | "devices"
                                | "freezer"
                        ) {
                            v1.entry(o.to_string())
                                .or_insert_with(|| PathBuf::from(mount_point));
                        }
                    }
                }
                _ => {}
            }
        }
        match unified_root {
            Some(root) => Layout::V2(root),
            None => Layout::V1(v1),
        }
    }

    /// The host's layout (read once).
    pub fn host() -> &'static Layout {
        static LAYOUT: OnceLock<Layout> = OnceLock::new();
        LAYOUT.get_or_init(|| {
            Layout::from_mountinfo(
                &std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default(),
            )
        })
    }

    pub fn is_v2(&self) -> bool {
        matches!(self, Layout::V2(_))
    }

    /// Whether `controller` is available: mounted (v1) or listed in the
    /// root's `cgroup.controllers` (v2).
    pub fn has(&self, controller: &str) -> bool {
        match self {
            Layout::V1(m) => m.contains_key(controller),
            Layout::V2(root) => read(root, "cgroup.controllers")
                .is_some_and(|t| t.split_whitespace().any(|c| c == controller)),
        }
    }

    /// The directory of `cgroups_path` for `controller` (v1), or in the
    /// unified hierarchy (v2, where `controller` is ignored).
    pub fn dir(&self, controller: &str, cgroups_path: &str) -> Option<PathBuf> {
        let path = driver::fs_path(cgroups_path);
        let rel = path.trim_start_matches('/');
        match self {
            Layout::V1(m) => m.get(controller).map(|root| root.join(rel)),
            Layout::V2(root) => Some(root.join(rel)),
        }
    }
}

/// A limit "above which" counts as unlimited: the kernel rounds
/// LONG_MAX down to a page multiple.
pub(crate) const UNLIMITED: u64 = 1 << 62;

pub(crate) fn read(dir: &Path, file: &str) -> Option<String> {
    std::fs::read_to_string(dir.join(file)).ok()
}

pub(crate) fn read_u64(dir: &Path, file: &str) -> Option<u64> {
    read(dir, file)?.trim().parse().ok()
}

/// `key value` lines (memory.stat, cpu.stat, …).
pub(crate) fn flat_keyed(text: &str) -> HashMap<&str, u64> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k, v.trim().parse().ok()?))
        })
        .collect()
}

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

/// `oom_kill` of the memory cgroup directory `dir` (v2's or v1's file).
pub(crate) fn oom_kills_in(dir: &Path, v2: bool) -> Option<u64> {
    let file = if v2 {
        "memory.events"
    } else {
        "memory.oom_control"
    };
    read(dir, file).and_then(|t| flat_keyed(&t).get("oom_kill").copied())
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
    let parent = driver::parent_fs_path(cgroups_path);
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
