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

/// The arguments a process was started with.
pub fn argv(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| {
            c.split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The file name of the program a process runs (`/proc/PID/exe`), without
/// the ` (deleted)` the kernel adds for an unlinked or memfd program.
pub fn exe_name(pid: u32) -> Option<String> {
    let l = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    let name = l.file_name()?.to_string_lossy().into_owned();
    Some(name.trim_end_matches(" (deleted)").to_string())
}

/// Whether a process is a per-pod (or per-container) monitor by what it
/// is: its program and the arguments in their places, never a word that a
/// wrapper (`timeout 600 husk shim …`) would also carry. A husk shim is
/// `husk shim --dir DIR` run from husk's binary or its sealed copy
/// (`memfd:husk`); containerd's are `containerd-shim*` programs; CRI-O's
/// is `conmon`. `belongs(arg)` ties it to one runtime: some argument of it
/// names that runtime's socket or a path under the socket's directory.
pub fn is_monitor(exe: &str, argv: &[String], belongs: impl Fn(&str) -> bool) -> bool {
    let husk_shim = exe.contains("husk")
        && argv.get(1).map(String::as_str) == Some("shim")
        && argv.get(2).map(String::as_str) == Some("--dir");
    let peer = exe.starts_with("containerd-shim") || exe == "conmon";
    (husk_shim || peer) && argv.iter().skip(1).any(|a| belongs(a))
}

/// The monitors (`is_monitor`) whose arguments name `dir` or a path below it.
pub fn monitors_under(dir: &Path) -> Vec<u32> {
    let me = std::process::id();
    let below = |a: &str| Path::new(a).starts_with(dir);
    all_processes()
        .keys()
        .copied()
        .filter(|pid| *pid != me)
        .filter(|pid| exe_name(*pid).is_some_and(|exe| is_monitor(&exe, &argv(*pid), below)))
        .collect()
}

/// Threads of a process (`Threads:` of /proc/PID/status).
pub fn threads(pid: u32) -> u64 {
    status_field(pid, "Threads:")
}

fn status_field(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
        })
        .unwrap_or(0)
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
    status_field(pid, "VmRSS:") * 1024
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
        assert!(threads(std::process::id()) >= 1);
    }

    #[test]
    fn monitors_are_known_by_program_and_argument_places() {
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let ours = |a: &str| a.starts_with("/run/h/");
        let shim = v(&["/usr/bin/husk", "shim", "--dir", "/run/h/s/abc"]);
        assert!(is_monitor("husk", &shim, ours));
        assert!(is_monitor("memfd:husk", &shim, ours));
        // A wrapper carries the same words, in other places, from another program.
        let wrapped = v(&["timeout", "600", "husk", "shim", "--dir", "/run/h/s/abc"]);
        assert!(!is_monitor("timeout", &wrapped, ours));
        assert!(!is_monitor("husk", &wrapped, ours));
        // The server is not a monitor, nor another runtime's shim.
        let serve = v(&["husk", "serve", "--state", "/run/h"]);
        assert!(!is_monitor("husk", &serve, ours));
        assert!(!is_monitor(
            "husk",
            &v(&["husk", "shim", "--dir", "/run/x/s/1"]),
            ours
        ));
        let ctd = v(&[
            "containerd-shim-runc-v2",
            "-namespace",
            "k8s.io",
            "-address",
            "/run/h/c.sock",
        ]);
        assert!(is_monitor("containerd-shim-runc-v2", &ctd, ours));
        assert!(is_monitor(
            "conmon",
            &v(&["conmon", "--socket-dir-path", "/run/h/"]),
            ours
        ));
        assert!(!is_monitor("bash", &v(&["bash", "-c", "/run/h/x"]), ours));
    }
}
