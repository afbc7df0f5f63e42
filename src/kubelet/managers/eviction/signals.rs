//! What eviction observes: each signal's available amount against its
//! capacity, read off the node.
//!
//! - `memory.available`: MemAvailable of `/proc/meminfo` (of MemTotal);
//! - `nodefs.*`: the file system of the kubelet's root directory;
//! - `imagefs.*`: the file system of the runtime's image store (ImageFsInfo's
//!   mount point), the node file system when the runtime names none;
//! - `pid.available`: `kernel.pid_max` less the processes running.

use crate::kubelet::kit::node_config::{Signal, Threshold};
use std::collections::HashMap;
use std::path::Path;

/// Available and capacity per signal.
pub type Observations = HashMap<Signal, (i64, i64)>;

fn fs(path: &Path, out: &mut Observations, bytes: Signal, inodes: Signal) {
    if let Ok(s) = rustix::fs::statvfs(path) {
        out.insert(
            bytes,
            (
                (s.f_bavail * s.f_frsize) as i64,
                (s.f_blocks * s.f_frsize) as i64,
            ),
        );
        if s.f_files > 0 {
            out.insert(inodes, (s.f_favail as i64, s.f_files as i64));
        }
    }
}

/// Reads every signal; `image_fs` is the runtime's image mount point.
pub fn observe(root: &Path, image_fs: Option<&str>) -> Observations {
    let mut out = Observations::new();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let kb = |k| crate::kubelet::kit::node_config::meminfo_bytes(&meminfo, k);
    out.insert(
        Signal::MemoryAvailable,
        (kb("MemAvailable:"), kb("MemTotal:")),
    );
    fs(
        root,
        &mut out,
        Signal::NodeFsAvailable,
        Signal::NodeFsInodesFree,
    );
    let image = image_fs.map(Path::new).unwrap_or(root);
    fs(
        image,
        &mut out,
        Signal::ImageFsAvailable,
        Signal::ImageFsInodesFree,
    );
    let pid_max = crate::kubelet::kit::node_config::pid_max();
    let procs = std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
                .count() as i64
        })
        .unwrap_or(0);
    out.insert(Signal::PidAvailable, (pid_max - procs, pid_max));
    out
}

/// Whether `t` is met: what is available is below its amount.
pub fn met(t: &Threshold, obs: &Observations) -> Option<(i64, i64)> {
    let (avail, cap) = *obs.get(&t.signal)?;
    let want = t.amount.of(cap);
    (avail < want).then_some((avail, want))
}

/// An amount as the kubelet prints it in messages (`100Mi`, `48288Ki`).
pub fn quantity(signal: Signal, v: i64) -> String {
    match signal {
        Signal::MemoryAvailable | Signal::NodeFsAvailable | Signal::ImageFsAvailable => {
            if v % (1 << 20) == 0 && v != 0 {
                format!("{}Mi", v >> 20)
            } else {
                format!("{}Ki", v / 1024)
            }
        }
        _ => v.to_string(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::kubelet::kit::node_config::parse_thresholds;

    #[test]
    fn thresholds_are_met_below_their_amount() {
        let t = parse_thresholds("memory.available<100Mi,nodefs.available<10%").unwrap();
        let mut obs = Observations::new();
        obs.insert(Signal::MemoryAvailable, (50 << 20, 1 << 30));
        obs.insert(Signal::NodeFsAvailable, (200, 1000));
        assert_eq!(met(&t[0], &obs), Some((50 << 20, 100 << 20)));
        assert_eq!(met(&t[1], &obs), None);
        obs.insert(Signal::NodeFsAvailable, (99, 1000));
        assert_eq!(met(&t[1], &obs), Some((99, 100)));
        assert_eq!(quantity(Signal::MemoryAvailable, 100 << 20), "100Mi");
        assert_eq!(quantity(Signal::MemoryAvailable, 5000), "4Ki");
        assert_eq!(quantity(Signal::PidAvailable, 7), "7");
    }

    #[test]
    fn the_host_is_observed() {
        let obs = observe(Path::new("/"), None);
        for s in [
            Signal::MemoryAvailable,
            Signal::NodeFsAvailable,
            Signal::ImageFsAvailable,
            Signal::PidAvailable,
        ] {
            let (avail, cap) = obs[&s];
            assert!(cap > 0 && avail <= cap, "{s:?}: {avail} of {cap}");
        }
    }
}
