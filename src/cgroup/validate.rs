//! What a `LinuxContainerResources` may hold, checked before anything is
//! created or written: the kernel's ranges for CPU, memory and cpuset
//! values, and `unified` keys that name a writable cgroup v2 file of a
//! controller the host has, with a one-line value.

use super::layout::Layout;
use super::resources::{invalid, ResourceError};
use crate::api::cri::LinuxContainerResources;

/// A cpuset list: `0-3,5`, ascending ranges of decimal numbers.
fn valid_cpuset(s: &str) -> bool {
    s.split(',').all(|part| {
        let mut it = part.splitn(2, '-');
        let a = it.next().and_then(|x| x.parse::<u32>().ok());
        match (a, it.next()) {
            (Some(_), None) => true,
            (Some(a), Some(b)) => b.parse::<u32>().map(|b| b >= a).unwrap_or(false),
            _ => false,
        }
    })
}

/// Refuses what neither the kernel nor the CRI allows.
pub fn validate(r: &LinuxContainerResources, layout: &Layout) -> Result<(), ResourceError> {
    if r.cpu_period != 0 && !(1_000..=1_000_000).contains(&r.cpu_period) {
        return Err(invalid(format!(
            "cpu_period {} µs is outside 1000..=1000000",
            r.cpu_period
        )));
    }
    if r.cpu_quota != 0 && r.cpu_quota != -1 && r.cpu_quota < 1_000 {
        return Err(invalid(format!(
            "cpu_quota {} µs is below the kernel's 1000 µs minimum (-1 means unlimited)",
            r.cpu_quota
        )));
    }
    if r.cpu_shares != 0 && !(2..=262_144).contains(&r.cpu_shares) {
        return Err(invalid(format!(
            "cpu_shares {} is outside 2..=262144",
            r.cpu_shares
        )));
    }
    if r.memory_limit_in_bytes < 0 {
        return Err(invalid(format!(
            "memory_limit_in_bytes {} is negative",
            r.memory_limit_in_bytes
        )));
    }
    if r.memory_swap_limit_in_bytes < -1 {
        return Err(invalid(format!(
            "memory_swap_limit_in_bytes {} is negative (-1 means unlimited)",
            r.memory_swap_limit_in_bytes
        )));
    }
    if r.memory_swap_limit_in_bytes > 0
        && r.memory_limit_in_bytes > 0
        && r.memory_swap_limit_in_bytes < r.memory_limit_in_bytes
    {
        return Err(invalid(format!(
            "memory_swap_limit_in_bytes {} (memory plus swap) is below memory_limit_in_bytes {}",
            r.memory_swap_limit_in_bytes, r.memory_limit_in_bytes
        )));
    }
    for (name, v) in [
        ("cpuset_cpus", &r.cpuset_cpus),
        ("cpuset_mems", &r.cpuset_mems),
    ] {
        if !v.is_empty() && !valid_cpuset(v) {
            return Err(invalid(format!("{name} {v:?} is not a list like 0-3,5")));
        }
    }
    for h in &r.hugepage_limits {
        if h.page_size.is_empty() || !h.page_size.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(invalid(format!(
                "hugepage size {:?} is not valid",
                h.page_size
            )));
        }
    }
    if !r.unified.is_empty() && !layout.is_v2() {
        return Err(invalid(
            "unified resources need cgroup v2; this host uses cgroup v1",
        ));
    }
    for (k, v) in &r.unified {
        check_unified(k, v, layout)?;
    }
    Ok(())
}

/// The cgroup v2 files a `unified` key may name: the writable interface
/// files of each controller (Documentation/admin-guide/cgroup-v2.rst).
const UNIFIED_FILES: &[(&str, &[&str])] = &[
    (
        "memory",
        &[
            "min",
            "low",
            "high",
            "max",
            "swap.high",
            "swap.max",
            "zswap.max",
            "zswap.writeback",
            "oom.group",
        ],
    ),
    (
        "cpu",
        &[
            "weight",
            "weight.nice",
            "max",
            "max.burst",
            "idle",
            "uclamp.min",
            "uclamp.max",
        ],
    ),
    (
        "cpuset",
        &["cpus", "mems", "cpus.partition", "cpus.exclusive"],
    ),
    ("io", &["weight", "max", "latency", "bfq.weight"]),
    ("pids", &["max"]),
    ("rdma", &["max"]),
    ("misc", &["max"]),
    ("cgroup", &["max.depth", "max.descendants"]),
];

/// A `unified` key is a writable file of a controller this host has
/// (`hugetlb.<size>.max` and `.rsvd.max` for any page size); its value is
/// one line.
fn check_unified(key: &str, value: &str, layout: &Layout) -> Result<(), ResourceError> {
    let Some((controller, file)) = key.split_once('.') else {
        return Err(invalid(format!(
            "unified key {key:?} is not a cgroup file name (<controller>.<file>)"
        )));
    };
    let known = match controller {
        "hugetlb" => file
            .strip_suffix(".rsvd.max")
            .or_else(|| file.strip_suffix(".max"))
            .is_some_and(|size| {
                !size.is_empty() && size.chars().all(|c| c.is_ascii_alphanumeric())
            }),
        _ => UNIFIED_FILES
            .iter()
            .any(|(c, files)| *c == controller && files.contains(&file)),
    };
    if !known {
        return Err(invalid(format!(
            "unified key {key:?} is not a writable cgroup v2 file"
        )));
    }
    if controller != "cgroup" && !layout.has(controller) {
        return Err(invalid(format!(
            "unified key {key:?}: this host has no {controller} controller"
        )));
    }
    if value.is_empty() || value.contains('\n') {
        return Err(invalid(format!(
            "unified key {key:?}: the value must be one non-empty line"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::path::PathBuf;

    fn res() -> LinuxContainerResources {
        LinuxContainerResources::default()
    }

    #[test]
    fn validation() {
        let v1 = Layout::V1(HashMap::new());
        assert!(validate(&res(), &v1).is_ok());
        let bad = [
            LinuxContainerResources {
                cpu_period: 10,
                ..res()
            },
            LinuxContainerResources {
                cpu_quota: 500,
                ..res()
            },
            LinuxContainerResources {
                cpu_shares: 1,
                ..res()
            },
            LinuxContainerResources {
                memory_limit_in_bytes: -5,
                ..res()
            },
            LinuxContainerResources {
                cpuset_cpus: "0-x".into(),
                ..res()
            },
            LinuxContainerResources {
                cpuset_mems: "3-1".into(),
                ..res()
            },
            LinuxContainerResources {
                memory_limit_in_bytes: 100 << 20,
                memory_swap_limit_in_bytes: 50 << 20,
                ..res()
            },
            LinuxContainerResources {
                unified: [("memory.high".to_string(), "1".to_string())].into(),
                ..res()
            },
        ];
        for b in bad {
            let e = validate(&b, &v1).expect_err("invalid");
            assert!(matches!(e, ResourceError::Invalid(_)), "{b:?}");
        }
        let ok = LinuxContainerResources {
            cpu_quota: -1,
            cpu_period: 100_000,
            cpu_shares: 1024,
            cpuset_cpus: "0-1,3".into(),
            memory_limit_in_bytes: 64 << 20,
            ..res()
        };
        assert!(validate(&ok, &v1).is_ok());
        let v2 = Layout::V2(PathBuf::from("/sys/fs/cgroup"));
        let u = LinuxContainerResources {
            unified: [("../x".to_string(), "1".to_string())].into(),
            ..res()
        };
        assert!(validate(&u, &v2).is_err());
    }

    #[test]
    fn unified_keys_are_writable_files_of_present_controllers() {
        let d = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            d.path().join("cgroup.controllers"),
            "cpu memory pids hugetlb\n",
        )
        .expect("write");
        let v2 = Layout::V2(d.path().to_path_buf());
        let with = |k: &str, v: &str| LinuxContainerResources {
            unified: [(k.to_string(), v.to_string())].into(),
            ..res()
        };
        for (k, v) in [
            ("memory.high", "max"),
            ("memory.min", "1048576"),
            ("cpu.weight", "50"),
            ("pids.max", "100"),
            ("hugetlb.2MB.rsvd.max", "0"),
            ("cgroup.max.depth", "3"),
        ] {
            assert!(validate(&with(k, v), &v2).is_ok(), "{k}");
        }
        for (k, v, why) in [
            ("memory", "1", "not a cgroup file name"),
            ("memory.current", "1", "not a writable"),
            ("memory.frobnicate", "1", "not a writable"),
            ("../x.max", "1", "not a writable"),
            ("cgroup.procs", "1", "not a writable"),
            ("io.max", "8:0 rbps=1", "no io controller"),
            ("memory.high", "", "one non-empty line"),
            ("memory.high", "1\n2", "one non-empty line"),
        ] {
            let e = validate(&with(k, v), &v2).expect_err(k);
            assert!(matches!(e, ResourceError::Invalid(_)));
            assert!(e.to_string().contains(why), "{k}: {e}");
        }
    }
}
