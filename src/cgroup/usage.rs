//! What a cgroup reports: CPU, memory and pids figures from the v1
//! controllers' files or the v2 unified files, as cAdvisor computes them
//! (working set = usage − inactive file pages; CPU from `cpuacct` or
//! `cpu.stat`; RSS is anonymous memory on v2).
//!
//! A reader names the figures it wants (`Figures`): the stats RPCs, which
//! the kubelet calls for every pod each housekeeping period, read only
//! the files the CRI carries; the metrics RPC reads every file. A
//! cgroup's directory is opened once and its files opened relative to it,
//! so the kernel walks the long cgroup path once, not once per file.

use super::layout::{flat_keyed, Layout, UNLIMITED};
use rustix::fd::OwnedFd;
use rustix::fs::{Mode, OFlags};
use std::io::Read;
use std::path::Path;

/// Which figures a reader wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Figures {
    /// What the CRI's stats carry: CPU usage, memory usage, working set,
    /// limit, RSS, faults and swap, the process count, pressure.
    Cri,
    /// Every figure (the metrics RPC): also user and system CPU,
    /// throttling, the peak, failures and OOM kills.
    All,
}

/// A cgroup directory, opened once (`O_PATH`); its files are opened
/// relative to it.
struct Dir(OwnedFd);

impl Dir {
    fn open(path: &Path) -> Option<Dir> {
        rustix::fs::open(
            path,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()
        .map(Dir)
    }

    fn read(&self, file: &str) -> Option<String> {
        let fd = rustix::fs::openat(
            &self.0,
            file,
            OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()?;
        let mut text = String::new();
        std::fs::File::from(fd).read_to_string(&mut text).ok()?;
        Some(text)
    }

    fn read_u64(&self, file: &str) -> Option<u64> {
        self.read(file)?.trim().parse().ok()
    }

    /// The `oom_kill` count of the memory controller's events.
    fn oom_kills(&self, v2: bool) -> Option<u64> {
        let file = if v2 {
            "memory.events"
        } else {
            "memory.oom_control"
        };
        self.read(file)
            .and_then(|t| flat_keyed(&t).get("oom_kill").copied())
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
    /// Pressure stall totals (v2 with PSI only).
    pub pressure: Option<Pressure>,
}

/// One line of a `*.pressure` file: the share of time some task
/// (`some`) or every task (`full`) of the cgroup waited, as averages in
/// percent over 10, 60 and 300 s, and the total in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PsiLine {
    pub avg10: f64,
    pub avg60: f64,
    pub avg300: f64,
    pub total_us: u64,
}

/// A resource's pressure: its `some` and `full` lines.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Psi {
    pub some: PsiLine,
    pub full: PsiLine,
}

/// Pressure stall information of a cgroup (v2 with PSI only); a resource
/// whose file is missing (io without the io controller) is None.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Pressure {
    pub cpu: Psi,
    pub memory: Option<Psi>,
    pub io: Option<Psi>,
}

/// Parses a `*.pressure` file; a missing `full` line (cpu before 5.13)
/// is all zero, as the kernel means it.
pub fn parse_psi(text: &str) -> Psi {
    let line = |kind: &str| {
        let mut l = PsiLine::default();
        if let Some(rest) = text.lines().find_map(|l| l.strip_prefix(kind)) {
            for field in rest.split_whitespace() {
                let Some((k, v)) = field.split_once('=') else {
                    continue;
                };
                match k {
                    "avg10" => l.avg10 = v.parse().unwrap_or(0.0),
                    "avg60" => l.avg60 = v.parse().unwrap_or(0.0),
                    "avg300" => l.avg300 = v.parse().unwrap_or(0.0),
                    "total" => l.total_us = v.parse().unwrap_or(0),
                    _ => {}
                }
            }
        }
        l
    };
    Psi {
        some: line("some "),
        full: line("full "),
    }
}

/// A v2 cgroup's pressure; None without `cpu.pressure` (PSI off).
pub fn v2_pressure(dir: &Path) -> Option<Pressure> {
    dir_pressure(&Dir::open(dir)?)
}

fn dir_pressure(dir: &Dir) -> Option<Pressure> {
    Some(Pressure {
        cpu: parse_psi(&dir.read("cpu.pressure")?),
        memory: dir.read("memory.pressure").map(|t| parse_psi(&t)),
        io: dir.read("io.pressure").map(|t| parse_psi(&t)),
    })
}

/// Reads the `figures` of the cgroup at `cgroups_path`; None when it does
/// not exist.
pub fn usage(layout: &Layout, cgroups_path: &str, figures: Figures) -> Option<Usage> {
    let timestamp = crate::sys::now_ns();
    let open = |controller: &str| {
        layout
            .dir(controller, cgroups_path)
            .and_then(|d| Dir::open(&d))
    };
    let u = match layout {
        Layout::V1(_) => Usage {
            timestamp,
            cpu: open("cpuacct").and_then(|acct| {
                // cpu.stat (throttling) is the cpu controller's, which may
                // be mounted apart from cpuacct.
                let cpu = (figures == Figures::All).then(|| open("cpu")).flatten();
                v1_cpu(&acct, cpu.as_ref(), figures)
            }),
            memory: open("memory").and_then(|d| v1_memory(&d, figures)),
            pids: open("pids").and_then(|d| d.read_u64("pids.current")),
            pressure: None,
        },
        Layout::V2(_) => {
            let dir = open("")?;
            Usage {
                timestamp,
                cpu: v2_cpu(&dir),
                memory: v2_memory(&dir, figures),
                pids: dir.read_u64("pids.current"),
                pressure: dir_pressure(&dir),
            }
        }
    };
    (u.cpu.is_some() || u.memory.is_some() || u.pids.is_some()).then_some(u)
}

fn v1_cpu(acct: &Dir, cpu: Option<&Dir>, figures: Figures) -> Option<Cpu> {
    let usage_ns = acct.read_u64("cpuacct.usage")?;
    let mut c = Cpu {
        usage_ns,
        ..Default::default()
    };
    if figures == Figures::All {
        c.user_ns = acct.read_u64("cpuacct.usage_user");
        c.system_ns = acct.read_u64("cpuacct.usage_sys");
    }
    if let Some(stat) = cpu.and_then(|d| d.read("cpu.stat")) {
        let s = flat_keyed(&stat);
        c.periods = s.get("nr_periods").copied();
        c.throttled_periods = s.get("nr_throttled").copied();
        c.throttled_ns = s.get("throttled_time").copied();
    }
    Some(c)
}

fn v1_memory(dir: &Dir, figures: Figures) -> Option<Memory> {
    let usage = dir.read_u64("memory.usage_in_bytes")?;
    let all = figures == Figures::All;
    let stat = dir.read("memory.stat").unwrap_or_default();
    let s = flat_keyed(&stat);
    let get = |k: &str| s.get(k).copied().unwrap_or(0);
    let inactive_file = get("total_inactive_file");
    Some(Memory {
        usage,
        limit: dir
            .read_u64("memory.limit_in_bytes")
            .filter(|l| *l < UNLIMITED),
        working_set: usage.saturating_sub(inactive_file),
        rss: get("total_rss"),
        cache: get("total_cache"),
        mapped_file: get("total_mapped_file"),
        active_file: get("total_active_file"),
        inactive_file,
        page_faults: get("total_pgfault"),
        major_page_faults: get("total_pgmajfault"),
        max_usage: all
            .then(|| dir.read_u64("memory.max_usage_in_bytes"))
            .flatten(),
        failcnt: all.then(|| dir.read_u64("memory.failcnt")).flatten(),
        swap: s.get("total_swap").copied(),
        oom_kills: all.then(|| dir.oom_kills(false)).flatten(),
    })
}

fn v2_cpu(dir: &Dir) -> Option<Cpu> {
    let stat = dir.read("cpu.stat")?;
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

fn v2_memory(dir: &Dir, figures: Figures) -> Option<Memory> {
    let usage = dir.read_u64("memory.current")?;
    let all = figures == Figures::All;
    let stat = dir.read("memory.stat").unwrap_or_default();
    let s = flat_keyed(&stat);
    let get = |k: &str| s.get(k).copied().unwrap_or(0);
    let inactive_file = get("inactive_file");
    Some(Memory {
        usage,
        limit: dir.read_u64("memory.max").filter(|l| *l < UNLIMITED),
        working_set: usage.saturating_sub(inactive_file),
        // cAdvisor's RSS on v2: anonymous memory.
        rss: get("anon"),
        cache: get("file"),
        mapped_file: get("file_mapped"),
        active_file: get("active_file"),
        inactive_file,
        page_faults: get("pgfault"),
        major_page_faults: get("pgmajfault"),
        max_usage: all.then(|| dir.read_u64("memory.peak")).flatten(),
        failcnt: None,
        swap: dir.read_u64("memory.swap.current"),
        oom_kills: all.then(|| dir.oom_kills(true)).flatten(),
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
        // Stall times of cgroups overlap: they do not add up.
        self.pressure = None;
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

#[cfg(test)]
mod tests {
    use super::*;

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
        let dir = Dir::open(d.path()).expect("open");
        let m = v1_memory(&dir, Figures::All).expect("memory");
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
        let m = v2_memory(&dir, Figures::All).expect("memory v2");
        assert_eq!(
            (m.usage, m.limit, m.working_set, m.rss),
            (4096, Some(8192), 0, 1024)
        );
        let c = v2_cpu(&dir).expect("cpu v2");
        assert_eq!(
            (c.usage_ns, c.user_ns, c.periods),
            (1_500_000, Some(1_000_000), Some(4))
        );
    }

    #[test]
    fn the_cri_figures_leave_the_other_files_unread() {
        let root = tempfile::tempdir().expect("tempdir");
        let mut mounts = std::collections::HashMap::new();
        for c in ["cpuacct", "cpu", "memory", "pids"] {
            let d = root.path().join(c);
            std::fs::create_dir_all(d.join("pod/ctr")).expect("mkdir");
            mounts.insert(c.to_string(), d);
        }
        let w = |c: &str, f: &str, s: &str| {
            std::fs::write(root.path().join(c).join("pod/ctr").join(f), s).expect("write")
        };
        let cpu_stat = "nr_periods 7\nnr_throttled 1\nthrottled_time 9\n";
        let mem_stat = "total_rss 4000\ntotal_inactive_file 1000\ntotal_swap 5\n";
        let oom = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n";
        for (c, f, text) in [
            ("cpuacct", "cpuacct.usage", "5000\n"),
            ("cpuacct", "cpuacct.usage_user", "3000\n"),
            ("cpuacct", "cpuacct.usage_sys", "2000\n"),
            ("cpu", "cpu.stat", cpu_stat),
            ("memory", "memory.usage_in_bytes", "10000\n"),
            ("memory", "memory.limit_in_bytes", "20000\n"),
            ("memory", "memory.stat", mem_stat),
            ("memory", "memory.max_usage_in_bytes", "15000\n"),
            ("memory", "memory.failcnt", "2\n"),
            ("memory", "memory.oom_control", oom),
            ("pids", "pids.current", "4\n"),
        ] {
            w(c, f, text);
        }
        let layout = Layout::V1(mounts);

        let all = usage(&layout, "/pod/ctr", Figures::All).expect("all");
        let (c, m) = (all.cpu.expect("cpu"), all.memory.expect("memory"));
        assert_eq!(
            (c.usage_ns, c.user_ns, c.system_ns),
            (5000, Some(3000), Some(2000))
        );
        assert_eq!(
            (c.periods, c.throttled_periods, c.throttled_ns),
            (Some(7), Some(1), Some(9))
        );
        assert_eq!(
            (m.max_usage, m.failcnt, m.oom_kills),
            (Some(15000), Some(2), Some(3))
        );
        assert_eq!(all.pids, Some(4));

        let cri = usage(&layout, "/pod/ctr", Figures::Cri).expect("cri");
        let (c, m) = (cri.cpu.expect("cpu"), cri.memory.expect("memory"));
        assert_eq!((c.usage_ns, c.user_ns, c.periods), (5000, None, None));
        assert_eq!(
            (m.usage, m.limit, m.working_set, m.rss, m.swap),
            (10000, Some(20000), 9000, 4000, Some(5))
        );
        assert_eq!((m.max_usage, m.failcnt, m.oom_kills), (None, None, None));
        assert_eq!(cri.pids, Some(4));

        assert_eq!(
            usage(&layout, "/pod/gone", Figures::Cri),
            None,
            "no such cgroup"
        );
    }

    #[test]
    fn pressure_totals_from_v2_files() {
        let d = tempfile::tempdir().expect("tempdir");
        let w = |f: &str, s: &str| std::fs::write(d.path().join(f), s).expect("write");
        w(
            "cpu.pressure",
            "some avg10=0.00 avg60=0.00 avg300=0.00 total=1500\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=700\n",
        );
        w(
            "memory.pressure",
            "some avg10=1.00 avg60=0.00 avg300=0.00 total=42\n",
        );
        let p = v2_pressure(d.path()).expect("pressure");
        assert_eq!(
            (p.cpu.some.total_us, p.cpu.full.total_us, p.cpu.some.avg10),
            (1500, 700, 0.0)
        );
        let m = p.memory.expect("memory pressure");
        assert_eq!(
            (m.some.total_us, m.some.avg10, m.full.total_us),
            (42, 1.0, 0)
        );
        assert_eq!(p.io, None, "no io.pressure file");
        std::fs::remove_file(d.path().join("cpu.pressure")).expect("rm");
        assert_eq!(v2_pressure(d.path()), None, "no PSI in this kernel");
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
            pressure: None,
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
