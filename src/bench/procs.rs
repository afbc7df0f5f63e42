//! Finding a runtime's processes from its socket, and their memory.
//!
//! The server is the process holding the listening unix socket (matched
//! through /proc/net/unix and /proc/PID/fd); the runtime's other processes
//! (shims, monitors) are found as its descendants and, for runtimes whose
//! shims are reparented away (containerd's, husk's), by name prefix.

use std::collections::{HashMap, HashSet};
use std::path::Path;

/// PIDs holding an open listening socket bound at `path`.
pub fn socket_owners(path: &Path) -> Vec<u32> {
    let Ok(table) = std::fs::read_to_string("/proc/net/unix") else {
        return Vec::new();
    };
    let want = path.display().to_string();
    let inodes: HashSet<String> = table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // Num RefCount Protocol Flags Type St Inode Path; St 01 = listening.
            (f.len() >= 8 && f[7] == want && f[3] == "00010000").then(|| f[6].to_string())
        })
        .collect();
    let mut out = Vec::new();
    for (pid, _) in all_processes() {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        let holds = fds.flatten().any(|fd| {
            std::fs::read_link(fd.path())
                .ok()
                .and_then(|l| l.to_str().map(str::to_string))
                .and_then(|l| {
                    l.strip_prefix("socket:[")
                        .map(|s| s.trim_end_matches(']').to_string())
                })
                .map(|ino| inodes.contains(&ino))
                .unwrap_or(false)
        });
        if holds {
            out.push(pid);
        }
    }
    out
}

/// (pid, (ppid, comm)) of every process.
pub fn all_processes() -> HashMap<u32, (u32, String)> {
    let mut out = HashMap::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in rd.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid ...
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = stat[open + 1..close].to_string();
        let ppid = stat[close + 1..]
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        out.insert(pid, (ppid, comm));
    }
    out
}

/// Processes (other than this one) whose command line mentions `needle`:
/// how shims reparented away from their server are found.
pub fn by_cmdline(needle: &str) -> Vec<u32> {
    let me = std::process::id();
    all_processes()
        .keys()
        .copied()
        .filter(|pid| *pid != me)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| {
                    String::from_utf8_lossy(&c)
                        .replace('\0', " ")
                        .contains(needle)
                })
                .unwrap_or(false)
        })
        .collect()
}

/// `roots`, their descendants, and processes whose comm starts with one of
/// `helper_prefixes` (reparented shims).
pub fn runtime_processes(roots: &[u32], helper_prefixes: &[&str]) -> Vec<u32> {
    let procs = all_processes();
    let mut set: HashSet<u32> = roots.iter().copied().collect();
    for (pid, (_, comm)) in &procs {
        if helper_prefixes.iter().any(|p| comm.starts_with(p)) {
            set.insert(*pid);
        }
    }
    loop {
        let before = set.len();
        for (pid, (ppid, _)) in &procs {
            if set.contains(ppid) {
                set.insert(*pid);
            }
        }
        if set.len() == before {
            break;
        }
    }
    let mut v: Vec<u32> = set.into_iter().collect();
    v.sort_unstable();
    v
}

/// CPU time (user + system) a process has used, in seconds.
pub fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    let Some(close) = stat.rfind(')') else {
        return 0.0;
    };
    let f: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    // After "comm)": state(0) ppid(1) ... utime(11) stime(12), in clock ticks.
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|i| f.get(*i).and_then(|v| v.parse::<u64>().ok()))
        .sum();
    // SAFETY: sysconf has no preconditions; _SC_CLK_TCK is a valid name.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    ticks as f64 / hz
}

/// Proportional set size (shared pages divided among their users), in bytes.
pub fn pss_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Pss:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

/// Resident set size of a process, in bytes (VmRSS).
pub fn rss_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_own_listening_socket_and_rss() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("s.sock");
        let _l = std::os::unix::net::UnixListener::bind(&p).expect("bind");
        assert_eq!(socket_owners(&p), vec![std::process::id()]);
        assert!(rss_bytes(std::process::id()) > 0);
        let procs = runtime_processes(&[std::process::id()], &[]);
        assert!(procs.contains(&std::process::id()));
    }
}
