//! Writing a [`ResourceConfig`] to a cgroup of the cgroupfs driver: on v1
//! the `cpu`, `memory` and `pids` hierarchies each get the directory
//! (`cpu.shares`, `cpu.cfs_quota_us`/`cpu.cfs_period_us`,
//! `memory.limit_in_bytes`, `pids.max`); on v2 the directory is made with
//! its controllers enabled down to it (`cpu.weight`, `cpu.max`,
//! `memory.max`, `pids.max`). Other hierarchies are left to the runtime,
//! which makes the containers' cgroups beneath.

use super::config::{weight, ResourceConfig, PERIOD};
use crate::cgroup::Layout;
use std::path::Path;

/// Why a cgroup could not be made or limited.
#[derive(Debug, thiserror::Error)]
#[error("cgroup {path}: {what}: {err}")]
pub struct CgroupError {
    pub path: String,
    pub what: String,
    pub err: String,
}

fn write(path: &str, dir: &Path, file: &str, value: &str) -> Result<(), CgroupError> {
    std::fs::write(dir.join(file), value).map_err(|e| CgroupError {
        path: path.into(),
        what: format!("write {value} to {file}"),
        err: e.to_string(),
    })
}

fn make(path: &str, dir: &Path) -> Result<(), CgroupError> {
    std::fs::create_dir_all(dir).map_err(|e| CgroupError {
        path: path.into(),
        what: format!("create {}", dir.display()),
        err: e.to_string(),
    })
}

/// Makes the cgroup at `path` (in every hierarchy that limits) and
/// applies `r` to it.
pub fn apply(layout: &Layout, path: &str, r: &ResourceConfig) -> Result<(), CgroupError> {
    match layout {
        Layout::V1(_) => {
            for c in ["cpu", "memory", "pids"] {
                if let Some(dir) = layout.dir(c, path) {
                    make(path, &dir)?;
                }
            }
            if let Some(dir) = layout.dir("cpu", path) {
                if let Some(s) = r.cpu_shares {
                    write(path, &dir, "cpu.shares", &s.to_string())?;
                }
                if let Some(q) = r.cpu_quota {
                    write(path, &dir, "cpu.cfs_period_us", &PERIOD.to_string())?;
                    let q = if q <= 0 { -1 } else { q };
                    write(path, &dir, "cpu.cfs_quota_us", &q.to_string())?;
                }
            }
            if let (Some(dir), Some(m)) = (layout.dir("memory", path), r.memory) {
                write(path, &dir, "memory.limit_in_bytes", &m.to_string())?;
            }
            if let (Some(dir), Some(p)) = (layout.dir("pids", path), r.pids) {
                write(path, &dir, "pids.max", &pids(p))?;
            }
        }
        Layout::V2(_) => {
            crate::cgroup::delegate(layout, path);
            let Some(dir) = layout.dir("", path) else {
                return Ok(());
            };
            make(path, &dir)?;
            if let Some(s) = r.cpu_shares {
                write(path, &dir, "cpu.weight", &weight(s).to_string())?;
            }
            if let Some(q) = r.cpu_quota {
                let q = if q <= 0 {
                    "max".to_string()
                } else {
                    q.to_string()
                };
                write(path, &dir, "cpu.max", &format!("{q} {PERIOD}"))?;
            }
            if let Some(m) = r.memory {
                let m = if m < 0 {
                    "max".to_string()
                } else {
                    m.to_string()
                };
                write(path, &dir, "memory.max", &m)?;
            }
            if let Some(p) = r.pids {
                write(path, &dir, "pids.max", &pids(p))?;
            }
        }
    }
    Ok(())
}

fn pids(p: i64) -> String {
    if p <= 0 {
        "max".into()
    } else {
        p.to_string()
    }
}

/// Whether the cgroup at `path` exists in the hierarchies that limit.
pub fn exists(layout: &Layout, path: &str) -> bool {
    match layout {
        Layout::V1(_) => ["cpu", "memory", "pids"]
            .iter()
            .filter_map(|c| layout.dir(c, path))
            .all(|d| d.is_dir()),
        Layout::V2(_) => layout.dir("", path).is_some_and(|d| d.is_dir()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn v1_and_v2_files() {
        let t = tempfile::tempdir().unwrap();
        let mut m = HashMap::new();
        for c in ["cpu", "memory", "pids"] {
            m.insert(c.to_string(), t.path().join(c));
        }
        let v1 = Layout::V1(m);
        let r = ResourceConfig {
            cpu_shares: Some(512),
            cpu_quota: Some(50_000),
            memory: Some(64 << 20),
            pids: Some(-1),
        };
        apply(&v1, "/kp/podu", &r).unwrap();
        let read = |p: &str| std::fs::read_to_string(t.path().join(p)).unwrap();
        assert_eq!(read("cpu/kp/podu/cpu.shares"), "512");
        assert_eq!(read("cpu/kp/podu/cpu.cfs_quota_us"), "50000");
        assert_eq!(read("memory/kp/podu/memory.limit_in_bytes"), "67108864");
        assert_eq!(read("pids/kp/podu/pids.max"), "max");
        assert!(exists(&v1, "/kp/podu"));
        let u = tempfile::tempdir().unwrap();
        let v2 = Layout::V2(u.path().to_path_buf());
        apply(
            &v2,
            "/kp/podu",
            &ResourceConfig {
                cpu_quota: Some(-1),
                memory: Some(-1),
                ..r
            },
        )
        .unwrap();
        let read = |p: &str| std::fs::read_to_string(u.path().join(p)).unwrap();
        assert_eq!(read("kp/podu/cpu.weight"), "20");
        assert_eq!(read("kp/podu/cpu.max"), "max 100000");
        assert_eq!(read("kp/podu/memory.max"), "max");
    }
}
