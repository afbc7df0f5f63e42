//! A container's (or pod's) cgroup: where its files are and what they say.
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
//! gone, a controller not mounted) leaves that figure unset. Writing
//! resources lives in `resources.rs`.

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
        let rel = cgroups_path.trim_start_matches('/');
        match self {
            Layout::V1(m) => m.get(controller).map(|root| root.join(rel)),
            Layout::V2(root) => Some(root.join(rel)),
        }
    }
}

/// CPU figures, in ns.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Cpu {
    pub usage_ns: u64,
    pub user_ns: Option<u64>,
    pub system_ns: Option<u64>,
    pub periods: Option<u64>,
    pub throttled_periods: Option<u64>,
    pub throttled_ns: Option<u64>,
}

/// Memory figures, in bytes (faults are counts).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Memory {
    pub usage: u64,
    /// None when unlimited.
    pub limit: Option<u64>,
    /// usage − inactive file pages (the kubelet's working set).
    pub working_set: u64,
    pub rss: u64,
    pub cache: u64,
    pub mapped_file: u64,
    pub active_file: u64,
    pub inactive_file: u64,
    pub page_faults: u64,
    pub major_page_faults: u64,
    pub max_usage: Option<u64>,
    pub failcnt: Option<u64>,
    pub swap: Option<u64>,
    pub oom_kills: Option<u64>,
}

/// What a cgroup reports, read at `timestamp` (ns since the epoch).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Usage {
    pub timestamp: i64,
    pub cpu: Option<Cpu>,
    pub memory: Option<Memory>,
    pub pids: Option<u64>,
}

/// A limit "above which" counts as unlimited: the kernel rounds
/// LONG_MAX down to a page multiple.
const UNLIMITED: u64 = 1 << 62;

fn read(dir: &Path, file: &str) -> Option<String> {
    std::fs::read_to_string(dir.join(file)).ok()
}

fn read_u64(dir: &Path, file: &str) -> Option<u64> {
    read(dir, file)?.trim().parse().ok()
}

/// `key value` lines (memory.stat, cpu.stat, …).
fn flat_keyed(text: &str) -> HashMap<&str, u64> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k, v.trim().parse().ok()?))
        })
        .collect()
}

/// Reads the cgroup at `cgroups_path`; None when it does not exist.
pub fn usage(layout: &Layout, cgroups_path: &str) -> Option<Usage> {
    let timestamp = crate::image::manager::now_ns();
    let u = match layout {
        Layout::V1(_) => Usage {
            timestamp,
            cpu: v1_cpu(layout, cgroups_path),
            memory: layout
                .dir("memory", cgroups_path)
                .and_then(|d| v1_memory(&d)),
            pids: layout
                .dir("pids", cgroups_path)
                .and_then(|d| read_u64(&d, "pids.current")),
        },
        Layout::V2(_) => {
            let dir = layout.dir("", cgroups_path)?;
            Usage {
                timestamp,
                cpu: v2_cpu(&dir),
                memory: v2_memory(&dir),
                pids: read_u64(&dir, "pids.current"),
            }
        }
    };
    (u.cpu.is_some() || u.memory.is_some() || u.pids.is_some()).then_some(u)
}

fn v1_cpu(layout: &Layout, path: &str) -> Option<Cpu> {
    let acct = layout.dir("cpuacct", path)?;
    let usage_ns = read_u64(&acct, "cpuacct.usage")?;
    let mut c = Cpu {
        usage_ns,
        user_ns: read_u64(&acct, "cpuacct.usage_user"),
        system_ns: read_u64(&acct, "cpuacct.usage_sys"),
        ..Default::default()
    };
    if let Some(stat) = layout.dir("cpu", path).and_then(|d| read(&d, "cpu.stat")) {
        let s = flat_keyed(&stat);
        c.periods = s.get("nr_periods").copied();
        c.throttled_periods = s.get("nr_throttled").copied();
        c.throttled_ns = s.get("throttled_time").copied();
    }
    Some(c)
}

fn v1_memory(dir: &Path) -> Option<Memory> {
    let usage = read_u64(dir, "memory.usage_in_bytes")?;
    let stat = read(dir, "memory.stat").unwrap_or_default();
    let s = flat_keyed(&stat);
    let get = |k: &str| s.get(k).copied().unwrap_or(0);
    let inactive_file = get("total_inactive_file");
    Some(Memory {
        usage,
        limit: read_u64(dir, "memory.limit_in_bytes").filter(|l| *l < UNLIMITED),
        working_set: usage.saturating_sub(inactive_file),
        rss: get("total_rss"),
        cache: get("total_cache"),
        mapped_file: get("total_mapped_file"),
        active_file: get("total_active_file"),
        inactive_file,
        page_faults: get("total_pgfault"),
        major_page_faults: get("total_pgmajfault"),
        max_usage: read_u64(dir, "memory.max_usage_in_bytes"),
        failcnt: read_u64(dir, "memory.failcnt"),
        swap: s.get("total_swap").copied(),
        oom_kills: read(dir, "memory.oom_control")
            .and_then(|t| flat_keyed(&t).get("oom_kill").copied()),
    })
}

fn v2_cpu(dir: &Path) -> Option<Cpu> {
    let stat = read(dir, "cpu.stat")?;
    let s = flat_keyed(&stat);
    let us = |k: &str| s.get(k).map(|v| v * 1000);
    Some(Cpu {
        usage_ns: us("usage_usec")?,
        user_ns: us("user_usec"),
        system_ns: us("system_usec"),
        periods: s.get("nr_periods").copied(),
        throttled_periods: s.get("nr_throttled").copied(),
        throttled_ns: us("throttled_usec"),
    })
}

fn v2_memory(dir: &Path) -> Option<Memory> {
    let usage = read_u64(dir, "memory.current")?;
    let stat = read(dir, "memory.stat").unwrap_or_default();
    let s = flat_keyed(&stat);
    let get = |k: &str| s.get(k).copied().unwrap_or(0);
    let inactive_file = get("inactive_file");
    Some(Memory {
        usage,
        limit: read_u64(dir, "memory.max").filter(|l| *l < UNLIMITED),
        working_set: usage.saturating_sub(inactive_file),
        // cAdvisor's RSS on v2: anonymous memory.
        rss: get("anon"),
        cache: get("file"),
        mapped_file: get("file_mapped"),
        active_file: get("active_file"),
        inactive_file,
        page_faults: get("pgfault"),
        major_page_faults: get("pgmajfault"),
        max_usage: read_u64(dir, "memory.peak"),
        failcnt: None,
        swap: read_u64(dir, "memory.swap.current"),
        oom_kills: read(dir, "memory.events").and_then(|t| flat_keyed(&t).get("oom_kill").copied()),
    })
}

fn add_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x + y),
        (x, None) => x,
        (None, y) => y,
    }
}

impl Usage {
    /// Adds another cgroup's figures (a pod = its pause plus containers).
    /// Limits do not add up; the pod keeps none.
    pub fn add(&mut self, o: &Usage) {
        self.timestamp = self.timestamp.max(o.timestamp);
        self.pids = add_opt(self.pids, o.pids);
        self.cpu = match (self.cpu, o.cpu) {
            (Some(a), Some(b)) => Some(Cpu {
                usage_ns: a.usage_ns + b.usage_ns,
                user_ns: add_opt(a.user_ns, b.user_ns),
                system_ns: add_opt(a.system_ns, b.system_ns),
                periods: add_opt(a.periods, b.periods),
                throttled_periods: add_opt(a.throttled_periods, b.throttled_periods),
                throttled_ns: add_opt(a.throttled_ns, b.throttled_ns),
            }),
            (a, b) => a.or(b),
        };
        self.memory = match (self.memory, o.memory) {
            (Some(a), Some(b)) => Some(Memory {
                usage: a.usage + b.usage,
                limit: None,
                working_set: a.working_set + b.working_set,
                rss: a.rss + b.rss,
                cache: a.cache + b.cache,
                mapped_file: a.mapped_file + b.mapped_file,
                active_file: a.active_file + b.active_file,
                inactive_file: a.inactive_file + b.inactive_file,
                page_faults: a.page_faults + b.page_faults,
                major_page_faults: a.major_page_faults + b.major_page_faults,
                max_usage: None,
                failcnt: add_opt(a.failcnt, b.failcnt),
                swap: add_opt(a.swap, b.swap),
                oom_kills: add_opt(a.oom_kills, b.oom_kills),
            }),
            (Some(a), None) => Some(Memory { limit: None, ..a }),
            (None, Some(b)) => Some(Memory { limit: None, ..b }),
            (None, None) => None,
        };
    }
}

/// Drops the limits of `res` that need a controller the host lacks, as
/// runc and containerd do (the kubelet sends hugepage limits for every page
/// size the node has, whether or not the hugetlb controller exists). Each
/// controller skipped is logged once per process; the names are returned.
pub fn prune_unsupported(
    layout: &Layout,
    res: &mut crate::api::cri::LinuxContainerResources,
) -> Vec<&'static str> {
    let mut skipped = Vec::new();
    if !res.hugepage_limits.is_empty() && !layout.has("hugetlb") {
        res.hugepage_limits.clear();
        skipped.push("hugetlb");
    }
    if (!res.cpuset_cpus.is_empty() || !res.cpuset_mems.is_empty()) && !layout.has("cpuset") {
        res.cpuset_cpus.clear();
        res.cpuset_mems.clear();
        skipped.push("cpuset");
    }
    if (res.cpu_shares > 0 || res.cpu_quota > 0 || res.cpu_period > 0) && !layout.has("cpu") {
        res.cpu_shares = 0;
        res.cpu_quota = 0;
        res.cpu_period = 0;
        skipped.push("cpu");
    }
    if (res.memory_limit_in_bytes > 0 || res.memory_swap_limit_in_bytes > 0)
        && !layout.has("memory")
    {
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
                "the host has no {c} cgroup controller: its limits are skipped"
            );
        }
    }
    skipped
}

/// SIGKILLs every process left in the cgroup at `cgroups_path` (execs,
/// children of an init that has exited: in a pod's shared PID namespace
/// they do not die with it); returns how many were signalled.
pub fn kill_all(layout: &Layout, cgroups_path: &str) -> usize {
    let dirs: Vec<PathBuf> = match layout {
        Layout::V2(_) => layout.dir("", cgroups_path).into_iter().collect(),
        Layout::V1(_) => ["pids", "memory", "cpu", "freezer", "devices"]
            .iter()
            .filter_map(|c| layout.dir(c, cgroups_path))
            .collect(),
    };
    let Some(text) = dirs
        .iter()
        .find_map(|d| std::fs::read_to_string(d.join("cgroup.procs")).ok())
    else {
        return 0;
    };
    let mut n = 0;
    for pid in text.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
        if let Some(p) = rustix::process::Pid::from_raw(pid) {
            if rustix::process::kill_process(p, rustix::process::Signal::KILL).is_ok() {
                n += 1;
            }
        }
    }
    // Killed is not yet gone: wait (briefly) until the cgroup is empty, so
    // that nothing of the container runs once its stop has returned.
    if n > 0 {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while std::time::Instant::now() < deadline
            && dirs.iter().any(|d| {
                std::fs::read_to_string(d.join("cgroup.procs")).is_ok_and(|t| !t.trim().is_empty())
            })
        {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
    n
}

/// Removes the cgroup at `cgroups_path` in every hierarchy, after killing
/// what is left in it (a half-made container whose runtime state was never
/// written). Missing directories are fine; returns how many were removed.
pub fn remove(layout: &Layout, cgroups_path: &str) -> usize {
    let rel = cgroups_path.trim_start_matches('/');
    if rel.is_empty() {
        return 0;
    }
    kill_all(layout, cgroups_path);
    let mut roots: Vec<&PathBuf> = match layout {
        Layout::V1(m) => m.values().collect(),
        Layout::V2(root) => vec![root],
    };
    roots.sort();
    roots.dedup();
    let mut n = 0;
    for root in roots {
        let dir = root.join(rel);
        // A killed process leaves its cgroup a moment after the signal.
        for _ in 0..200 {
            match std::fs::remove_dir(&dir) {
                Ok(()) => {
                    n += 1;
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(5)),
            }
        }
    }
    n
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
        assert_eq!(prune_unsupported(&l, &mut r), ["hugetlb", "cpuset"]);
        assert!(r.hugepage_limits.is_empty() && r.cpuset_cpus.is_empty());
        assert_eq!((r.cpu_shares, r.memory_limit_in_bytes), (2, 1 << 20));
        assert!(prune_unsupported(&l, &mut r).is_empty());
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

    #[test]
    fn reads_v1_and_v2_files() {
        let d = tempfile::tempdir().expect("tempdir");
        let w = |f: &str, s: &str| std::fs::write(d.path().join(f), s).expect("write");
        w("memory.usage_in_bytes", "10000\n");
        w("memory.limit_in_bytes", "9223372036854771712\n");
        w(
            "memory.stat",
            "cache 1\ntotal_cache 300\ntotal_rss 7000\ntotal_inactive_file 2500\ntotal_pgfault 42\ntotal_pgmajfault 3\n",
        );
        let m = v1_memory(d.path()).expect("memory");
        assert_eq!(m.working_set, 7500);
        assert_eq!(
            (m.rss, m.cache, m.page_faults, m.major_page_faults),
            (7000, 300, 42, 3)
        );
        assert_eq!(m.limit, None);

        w("memory.current", "4096\n");
        w("memory.max", "8192\n");
        w(
            "memory.stat",
            "anon 1024\nfile 2048\ninactive_file 5000\npgfault 9\npgmajfault 1\n",
        );
        w(
            "cpu.stat",
            "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\nnr_periods 4\n",
        );
        let m = v2_memory(d.path()).expect("memory v2");
        assert_eq!(
            (m.usage, m.limit, m.working_set, m.rss),
            (4096, Some(8192), 0, 1024)
        );
        let c = v2_cpu(d.path()).expect("cpu v2");
        assert_eq!(
            (c.usage_ns, c.user_ns, c.periods),
            (1_500_000, Some(1_000_000), Some(4))
        );
    }

    #[test]
    fn pod_usage_is_the_sum() {
        let a = Usage {
            timestamp: 1,
            cpu: Some(Cpu {
                usage_ns: 10,
                ..Default::default()
            }),
            memory: Some(Memory {
                usage: 100,
                working_set: 80,
                limit: Some(1000),
                ..Default::default()
            }),
            pids: Some(1),
        };
        let mut p = a.clone();
        p.add(&a);
        assert_eq!(p.cpu.map(|c| c.usage_ns), Some(20));
        assert_eq!(
            p.memory.map(|m| (m.usage, m.working_set, m.limit)),
            Some((200, 160, None))
        );
        assert_eq!(p.pids, Some(2));
    }
}
