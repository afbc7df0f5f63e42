//! The CRI's container resources and NRI's, both ways: what an update
//! asks, as plugins see it, and what a plugin answers, as husk applies it.

use crate::api::cri::{HugepageLimit, LinuxContainerResources};
use crate::api::nri as api;

/// CRI resources (zero: unset) as NRI's.
pub fn to_nri(r: &LinuxContainerResources) -> api::LinuxResources {
    let i = |v: i64| (v != 0).then_some(api::OptionalInt64 { value: v });
    let u = |v: i64| (v > 0).then_some(api::OptionalUInt64 { value: v as u64 });
    api::LinuxResources {
        memory: Some(api::LinuxMemory {
            limit: i(r.memory_limit_in_bytes),
            swap: i(r.memory_swap_limit_in_bytes),
            ..Default::default()
        }),
        cpu: Some(api::LinuxCpu {
            shares: u(r.cpu_shares),
            quota: i(r.cpu_quota),
            period: u(r.cpu_period),
            cpus: r.cpuset_cpus.clone(),
            mems: r.cpuset_mems.clone(),
            ..Default::default()
        }),
        hugepage_limits: r
            .hugepage_limits
            .iter()
            .map(|h| api::HugepageLimit {
                page_size: h.page_size.clone(),
                limit: h.limit,
            })
            .collect(),
        unified: r.unified.clone(),
        ..Default::default()
    }
}

/// NRI's resources as the CRI's (unset: zero), keeping `base`'s OOM
/// score adjustment, which NRI's resources do not carry.
pub fn from_nri(
    n: &api::LinuxResources,
    base: &LinuxContainerResources,
) -> LinuxContainerResources {
    let m = n.memory.unwrap_or_default();
    let c = n.cpu.clone().unwrap_or_default();
    LinuxContainerResources {
        cpu_period: c.period.map_or(0, |v| v.value as i64),
        cpu_quota: c.quota.map_or(0, |v| v.value),
        cpu_shares: c.shares.map_or(0, |v| v.value as i64),
        memory_limit_in_bytes: m.limit.map_or(0, |v| v.value),
        memory_swap_limit_in_bytes: m.swap.map_or(0, |v| v.value),
        oom_score_adj: base.oom_score_adj,
        cpuset_cpus: c.cpus,
        cpuset_mems: c.mems,
        hugepage_limits: n
            .hugepage_limits
            .iter()
            .map(|h| HugepageLimit {
                page_size: h.page_size.clone(),
                limit: h.limit,
            })
            .collect(),
        unified: n.unified.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_go_there_and_back() {
        let r = LinuxContainerResources {
            cpu_period: 100_000,
            cpu_quota: 50_000,
            cpu_shares: 512,
            memory_limit_in_bytes: 1 << 28,
            memory_swap_limit_in_bytes: 1 << 29,
            oom_score_adj: 7,
            cpuset_cpus: "0".into(),
            cpuset_mems: "0".into(),
            hugepage_limits: vec![HugepageLimit {
                page_size: "2MB".into(),
                limit: 1 << 21,
            }],
            unified: [("memory.high".to_string(), "max".to_string())].into(),
        };
        assert_eq!(from_nri(&to_nri(&r), &r), r);
        let none = to_nri(&LinuxContainerResources::default());
        assert_eq!(none.memory.expect("memory").limit, None);
    }
}
