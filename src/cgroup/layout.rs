//! Where the hierarchy is: found once, from `/proc/self/mountinfo` (see
//! the room's header), and how a cgroup's files are read there.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The environment variable in which the server hands its layout down.
pub const LAYOUT_ENV: &str = "HUSK_CGROUP_LAYOUT";

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

    /// The host's layout (found once a process): handed down by the
    /// server in `LAYOUT_ENV` to the shims it starts, else read from the
    /// mount table. A pod's shim is a new process, and on a node of a
    /// thousand pods the table has thousands of lines to read.
    pub fn host() -> &'static Layout {
        static LAYOUT: OnceLock<Layout> = OnceLock::new();
        LAYOUT.get_or_init(|| {
            std::env::var(LAYOUT_ENV)
                .ok()
                .and_then(|s| Layout::decode(&s))
                .unwrap_or_else(|| {
                    Layout::from_mountinfo(
                        &std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default(),
                    )
                })
        })
    }

    /// `v2:<root>`, or `v1:<controller>=<mount point>;…`.
    pub fn encode(&self) -> String {
        match self {
            Layout::V2(root) => format!("v2:{}", root.display()),
            Layout::V1(m) => {
                let mut parts: Vec<String> = m
                    .iter()
                    .map(|(c, p)| format!("{c}={}", p.display()))
                    .collect();
                parts.sort();
                format!("v1:{}", parts.join(";"))
            }
        }
    }

    /// The layout `encode` wrote; None if `s` is not one.
    pub fn decode(s: &str) -> Option<Layout> {
        if let Some(root) = s.strip_prefix("v2:") {
            return (!root.is_empty()).then(|| Layout::V2(PathBuf::from(root)));
        }
        let v1 = s.strip_prefix("v1:")?;
        let mut m = HashMap::new();
        for part in v1.split(';').filter(|p| !p.is_empty()) {
            let (c, p) = part.split_once('=')?;
            m.insert(c.to_string(), PathBuf::from(p));
        }
        Some(Layout::V1(m))
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
        let path = super::paths::fs_path(cgroups_path);
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

/// `key value` lines (memory.stat, cpu.stat, …).
pub(crate) fn flat_keyed(text: &str) -> HashMap<&str, u64> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k, v.trim().parse().ok()?))
        })
        .collect()
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
