//! Live resource changes on a container's cgroup (UpdateContainerResources).
//!
//! A CRI `LinuxContainerResources` update names only what changes: a zero
//! number or an empty string leaves that setting as it is (as containerd
//! treats it). [`validate`] (in `validate.rs`) refuses values the kernel or the CRI forbid
//! before anything is written; [`apply`] writes the set fields to cgroup v1
//! files (`cpu.shares`, `cpu.cfs_period_us`, `cpu.cfs_quota_us`,
//! `cpuset.cpus`, `cpuset.mems`, `memory.limit_in_bytes`,
//! `memory.memsw.limit_in_bytes`, `hugetlb.<size>.limit_in_bytes`) or their
//! v2 forms (`cpu.weight`, `cpu.max`, `memory.max`, `memory.swap.max`,
//! `hugetlb.<size>.max`, and `unified` keys as file names). Every file's old
//! value is read before it is written, and a failure puts the written ones
//! back, so an update applies whole or not at all. [`merge`] gives the
//! resources to record afterwards.
//!
//! `oom_score_adj` is recorded but not applied to running processes (as with
//! runc's update).

use super::layout::Layout;
use crate::api::cri::LinuxContainerResources;
use std::io;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum ResourceError {
    #[error("{0}")]
    Invalid(String),
    #[error("cgroup {path} of the container does not exist")]
    NoCgroup { path: PathBuf },
    #[error("memory limit {limit} bytes is below the {what}'s working set of {working_set} bytes: the kernel would OOM-kill it")]
    BelowUsage {
        /// "container" or "pod".
        what: &'static str,
        limit: u64,
        working_set: u64,
    },
    #[error("{0}")]
    Systemd(String),
    #[error("write {value:?} to {path}: {source}")]
    Write {
        path: PathBuf,
        value: String,
        source: io::Error,
    },
}

pub(super) fn invalid(m: impl Into<String>) -> ResourceError {
    ResourceError::Invalid(m.into())
}

/// The resources to record: `new`'s set fields over `old`.
pub fn merge(
    old: &LinuxContainerResources,
    new: &LinuxContainerResources,
) -> LinuxContainerResources {
    let num = |n: i64, o: i64| if n != 0 { n } else { o };
    let text = |n: &String, o: &String| if n.is_empty() { o.clone() } else { n.clone() };
    let mut out = LinuxContainerResources {
        cpu_period: num(new.cpu_period, old.cpu_period),
        cpu_quota: num(new.cpu_quota, old.cpu_quota),
        cpu_shares: num(new.cpu_shares, old.cpu_shares),
        memory_limit_in_bytes: num(new.memory_limit_in_bytes, old.memory_limit_in_bytes),
        oom_score_adj: num(new.oom_score_adj, old.oom_score_adj),
        cpuset_cpus: text(&new.cpuset_cpus, &old.cpuset_cpus),
        cpuset_mems: text(&new.cpuset_mems, &old.cpuset_mems),
        hugepage_limits: old.hugepage_limits.clone(),
        unified: old.unified.clone(),
        memory_swap_limit_in_bytes: num(
            new.memory_swap_limit_in_bytes,
            old.memory_swap_limit_in_bytes,
        ),
    };
    for h in &new.hugepage_limits {
        out.hugepage_limits.retain(|o| o.page_size != h.page_size);
        out.hugepage_limits.push(h.clone());
    }
    for (k, v) in &new.unified {
        out.unified.insert(k.clone(), v.clone());
    }
    out
}

/// Writes files, remembering old values so a failure can put them back.
struct Writes {
    done: Vec<(PathBuf, String)>,
}

impl Writes {
    fn write(&mut self, path: PathBuf, value: String) -> Result<(), ResourceError> {
        let old = std::fs::read_to_string(&path).map_err(|source| ResourceError::Write {
            path: path.clone(),
            value: value.clone(),
            source,
        })?;
        std::fs::write(&path, &value).map_err(|source| ResourceError::Write {
            path: path.clone(),
            value,
            source,
        })?;
        self.done.push((path, old.trim().to_string()));
        Ok(())
    }

    fn undo(self) {
        for (path, old) in self.done.into_iter().rev() {
            if let Err(e) = std::fs::write(&path, &old) {
                tracing::warn!(path = %path.display(), error = %e, "restoring a cgroup value");
            }
        }
    }
}

fn dir_of(layout: &Layout, controller: &str, path: &str) -> Result<PathBuf, ResourceError> {
    let d = layout
        .dir(controller, path)
        .ok_or_else(|| invalid(format!("the {controller} cgroup controller is not mounted")))?;
    if d.is_dir() {
        Ok(d)
    } else {
        Err(ResourceError::NoCgroup { path: d })
    }
}

fn read_i64(p: &Path) -> Option<i64> {
    std::fs::read_to_string(p).ok()?.trim().parse().ok()
}

/// Applies `r`'s set fields to the cgroup at `cgroups_path`, whole or not
/// at all. `r` must have passed [`validate`].
pub fn apply(
    layout: &Layout,
    cgroups_path: &str,
    r: &LinuxContainerResources,
) -> Result<(), ResourceError> {
    let mut w = Writes { done: Vec::new() };
    let result = match layout {
        Layout::V1(_) => apply_v1(&mut w, layout, cgroups_path, r),
        Layout::V2(_) => apply_v2(&mut w, layout, cgroups_path, r),
    };
    if result.is_err() {
        w.undo();
    }
    result
}

fn apply_v1(
    w: &mut Writes,
    layout: &Layout,
    path: &str,
    r: &LinuxContainerResources,
) -> Result<(), ResourceError> {
    if r.cpu_shares != 0 || r.cpu_period != 0 || r.cpu_quota != 0 {
        let cpu = dir_of(layout, "cpu", path)?;
        if r.cpu_shares != 0 {
            w.write(cpu.join("cpu.shares"), r.cpu_shares.to_string())?;
        }
        if r.cpu_period != 0 {
            w.write(cpu.join("cpu.cfs_period_us"), r.cpu_period.to_string())?;
        }
        if r.cpu_quota != 0 {
            w.write(cpu.join("cpu.cfs_quota_us"), r.cpu_quota.to_string())?;
        }
    }
    if !r.cpuset_cpus.is_empty() || !r.cpuset_mems.is_empty() {
        let cs = dir_of(layout, "cpuset", path)?;
        if !r.cpuset_cpus.is_empty() {
            w.write(cs.join("cpuset.cpus"), r.cpuset_cpus.clone())?;
        }
        if !r.cpuset_mems.is_empty() {
            w.write(cs.join("cpuset.mems"), r.cpuset_mems.clone())?;
        }
    }
    if r.memory_limit_in_bytes != 0 || r.memory_swap_limit_in_bytes != 0 {
        let mem = dir_of(layout, "memory", path)?;
        let memsw = mem.join("memory.memsw.limit_in_bytes");
        let has_swap_file = memsw.exists();
        let limit = r.memory_limit_in_bytes;
        let mut swap = r.memory_swap_limit_in_bytes;
        if swap != 0 && !has_swap_file {
            return Err(invalid(
                "memory_swap_limit_in_bytes needs swap accounting, which this kernel has off",
            ));
        }
        // memory ≤ memory+swap must hold after each write: raise memsw
        // first when the new limit goes above it.
        let cur_sw = read_i64(&memsw).unwrap_or(i64::MAX);
        if swap == 0 && limit > 0 && has_swap_file && cur_sw < limit {
            swap = limit;
        }
        let swap_v = if swap == -1 {
            "-1".to_string()
        } else {
            swap.to_string()
        };
        let cur_limit = read_i64(&mem.join("memory.limit_in_bytes")).unwrap_or(i64::MAX);
        match (limit != 0, swap != 0) {
            (true, true) if swap == -1 || swap > cur_limit => {
                w.write(memsw.clone(), swap_v)?;
                w.write(mem.join("memory.limit_in_bytes"), limit.to_string())?;
            }
            (true, true) => {
                w.write(mem.join("memory.limit_in_bytes"), limit.to_string())?;
                w.write(memsw.clone(), swap_v)?;
            }
            (true, false) => w.write(mem.join("memory.limit_in_bytes"), limit.to_string())?,
            (false, true) => w.write(memsw.clone(), swap_v)?,
            (false, false) => {}
        }
    }
    for h in &r.hugepage_limits {
        let d = dir_of(layout, "hugetlb", path)?;
        w.write(
            d.join(format!("hugetlb.{}.limit_in_bytes", h.page_size)),
            h.limit.to_string(),
        )?;
    }
    Ok(())
}

/// cpu.shares (2..262144) to cpu.weight (1..10000) with the curve runc
/// uses since 1.3.2 (and libcontainer at create), so that 2 → 1, 1024 (the
/// default) → 100 and 262144 → 10000; an update writes what a create would.
pub fn shares_to_weight(shares: u64) -> u64 {
    match shares {
        0 => 0,
        1..=2 => 1,
        262_144.. => 10_000,
        s => {
            let l = (s as f64).log2();
            let exponent = (l * l + 125.0 * l) / 612.0 - 7.0 / 34.0;
            (10f64.powf(exponent).ceil() as u64).clamp(1, 10_000)
        }
    }
}

/// v1 refuses a memory limit below what it cannot reclaim (EBUSY); v2
/// takes it and OOM-kills the container instead. An update is not a kill:
/// below the working set (usage less inactive file pages) it is refused
/// on v2 as v1 refuses it.
pub fn check_memory_limit(
    layout: &Layout,
    path: &str,
    r: &LinuxContainerResources,
) -> Result<(), ResourceError> {
    if r.memory_limit_in_bytes <= 0 || !layout.is_v2() {
        return Ok(());
    }
    if let Some(m) = super::usage(layout, path, super::Figures::Cri).and_then(|u| u.memory) {
        if (r.memory_limit_in_bytes as u64) < m.working_set {
            return Err(ResourceError::BelowUsage {
                what: "container",
                limit: r.memory_limit_in_bytes as u64,
                working_set: m.working_set,
            });
        }
    }
    Ok(())
}

fn apply_v2(
    w: &mut Writes,
    layout: &Layout,
    path: &str,
    r: &LinuxContainerResources,
) -> Result<(), ResourceError> {
    let d = dir_of(layout, "", path)?;
    if r.cpu_shares != 0 {
        w.write(
            d.join("cpu.weight"),
            shares_to_weight(r.cpu_shares as u64).to_string(),
        )?;
    }
    if r.cpu_quota != 0 || r.cpu_period != 0 {
        let cur = std::fs::read_to_string(d.join("cpu.max")).unwrap_or_default();
        let mut it = cur.split_whitespace();
        let (cur_quota, cur_period) = (
            it.next().unwrap_or("max").to_string(),
            it.next().unwrap_or("100000").to_string(),
        );
        let quota = match r.cpu_quota {
            0 => cur_quota,
            -1 => "max".to_string(),
            q => q.to_string(),
        };
        let period = match r.cpu_period {
            0 => cur_period,
            p => p.to_string(),
        };
        w.write(d.join("cpu.max"), format!("{quota} {period}"))?;
    }
    if !r.cpuset_cpus.is_empty() {
        w.write(d.join("cpuset.cpus"), r.cpuset_cpus.clone())?;
    }
    if !r.cpuset_mems.is_empty() {
        w.write(d.join("cpuset.mems"), r.cpuset_mems.clone())?;
    }
    if r.memory_limit_in_bytes != 0 {
        check_memory_limit(layout, path, r)?;
        w.write(d.join("memory.max"), r.memory_limit_in_bytes.to_string())?;
    }
    if r.memory_swap_limit_in_bytes != 0 {
        // The CRI gives memory+swap; v2 limits swap alone.
        let v = if r.memory_swap_limit_in_bytes == -1 {
            "max".to_string()
        } else {
            let mem = if r.memory_limit_in_bytes > 0 {
                r.memory_limit_in_bytes
            } else {
                read_i64(&d.join("memory.max"))
                    .ok_or_else(|| invalid("memory_swap_limit_in_bytes needs a memory limit"))?
            };
            (r.memory_swap_limit_in_bytes - mem).max(0).to_string()
        };
        w.write(d.join("memory.swap.max"), v)?;
    }
    for h in &r.hugepage_limits {
        w.write(
            d.join(format!("hugetlb.{}.max", h.page_size)),
            h.limit.to_string(),
        )?;
    }
    for (k, v) in &r.unified {
        w.write(d.join(k), v.clone())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res() -> LinuxContainerResources {
        LinuxContainerResources::default()
    }

    #[test]
    fn merge_keeps_what_is_unset() {
        let old = LinuxContainerResources {
            cpu_shares: 512,
            cpu_quota: 50_000,
            memory_limit_in_bytes: 64 << 20,
            cpuset_cpus: "0".into(),
            ..res()
        };
        let new = LinuxContainerResources {
            cpu_quota: 20_000,
            memory_limit_in_bytes: 128 << 20,
            ..res()
        };
        let m = merge(&old, &new);
        assert_eq!(m.cpu_shares, 512);
        assert_eq!(m.cpu_quota, 20_000);
        assert_eq!(m.memory_limit_in_bytes, 128 << 20);
        assert_eq!(m.cpuset_cpus, "0");
    }

    #[test]
    fn weight_conversion() {
        assert_eq!(shares_to_weight(2), 1);
        assert_eq!(shares_to_weight(1024), 100);
        assert_eq!(shares_to_weight(262_144), 10_000);
    }

    #[test]
    fn a_failed_write_puts_earlier_ones_back() {
        let d = tempfile::tempdir().expect("tempdir");
        let cpu = d.path().join("cpu/pod/c1");
        std::fs::create_dir_all(&cpu).expect("mkdir");
        std::fs::write(cpu.join("cpu.shares"), "1024\n").expect("w");
        std::fs::write(cpu.join("cpu.cfs_period_us"), "100000\n").expect("w");
        // No cpu.cfs_quota_us: the third write fails.
        let layout = Layout::V1([("cpu".to_string(), d.path().join("cpu"))].into());
        let r = LinuxContainerResources {
            cpu_shares: 256,
            cpu_period: 50_000,
            cpu_quota: 20_000,
            ..res()
        };
        assert!(apply(&layout, "/pod/c1", &r).is_err());
        let read = |f: &str| std::fs::read_to_string(cpu.join(f)).expect("read");
        assert_eq!(read("cpu.shares"), "1024");
        assert_eq!(read("cpu.cfs_period_us"), "100000");
        std::fs::write(cpu.join("cpu.cfs_quota_us"), "-1\n").expect("w");
        apply(&layout, "/pod/c1", &r).expect("apply");
        assert_eq!(read("cpu.cfs_quota_us"), "20000");
        assert_eq!(read("cpu.shares"), "256");
        let missing = apply(&layout, "/pod/none", &r).expect_err("no cgroup");
        assert!(matches!(missing, ResourceError::NoCgroup { .. }));
    }
}
