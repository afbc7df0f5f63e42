//! Ending a cgroup: every process in it killed (through `cgroup.kill`
//! where the kernel has it, v2 since 5.14, so nothing forks its way out
//! between a read of `cgroup.procs` and the signals), then the directory
//! removed in every hierarchy.

use super::layout::Layout;
use std::path::PathBuf;

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
    let pids: Vec<i32> = text
        .lines()
        .filter_map(|l| l.trim().parse::<i32>().ok())
        .collect();
    let mut n = 0;
    // v2: one write kills the whole subtree, forks in flight included.
    let killed_by_kernel = match layout {
        Layout::V2(_) if !pids.is_empty() => dirs
            .first()
            .is_some_and(|d| std::fs::write(d.join("cgroup.kill"), "1").is_ok()),
        _ => false,
    };
    if killed_by_kernel {
        n = pids.len();
    } else {
        for pid in pids {
            if let Some(p) = rustix::process::Pid::from_raw(pid) {
                if rustix::process::kill_process(p, rustix::process::Signal::KILL).is_ok() {
                    n += 1;
                }
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
    let path = super::paths::fs_path(cgroups_path);
    let rel = path.trim_start_matches('/');
    if rel.is_empty() {
        return 0;
    }
    kill_all(layout, cgroups_path);
    // A systemd scope goes with its unit (stopping one kills what is left).
    if let Err(e) = super::systemd::stop_unit(cgroups_path) {
        tracing::warn!(cgroups_path, error = %e, "stop the container's scope");
    }
    let mut n = 0;
    for dir in dirs(layout, cgroups_path) {
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

/// The directories of the cgroup at `cgroups_path`, one in each hierarchy
/// of `layout` (a co-mounted hierarchy once), whether or not they exist.
pub fn dirs(layout: &Layout, cgroups_path: &str) -> Vec<PathBuf> {
    let path = super::paths::fs_path(cgroups_path);
    let rel = path.trim_start_matches('/');
    if rel.is_empty() {
        return Vec::new();
    }
    let mut roots: Vec<&PathBuf> = match layout {
        Layout::V1(m) => m.values().collect(),
        Layout::V2(root) => vec![root],
    };
    roots.sort();
    roots.dedup();
    roots.into_iter().map(|r| r.join(rel)).collect()
}
