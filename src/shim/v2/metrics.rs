//! A Stats answer's metrics (containerd's cgroups v1 or v2 `Metrics`) as
//! husk's cgroup figures, computed as the cgroup readers compute them
//! (working set = usage − inactive file pages; RSS is anonymous memory on
//! v2). A VM runtime reports its guest's cgroups this way.

use crate::api::containerd::{CgroupsV1Metrics, CgroupsV2Metrics};
use crate::cgroup::{usage::Cpu, usage::Memory, Usage};
use prost::Message;

/// `value` of type `type_url` (the part after the last `/` is matched), as
/// read at `timestamp`; None for a type husk does not know.
pub fn decode(type_url: &str, value: &[u8], timestamp: i64) -> Option<Usage> {
    let limit = |l: u64| (l > 0 && l < (1 << 62)).then_some(l);
    match type_url.rsplit('/').next().unwrap_or("") {
        "io.containerd.cgroups.v1.Metrics" => {
            let m = CgroupsV1Metrics::decode(value).ok()?;
            let cpu = m.cpu.and_then(|c| c.usage).map(|u| Cpu {
                usage_ns: u.total,
                user_ns: Some(u.user),
                system_ns: Some(u.kernel),
                ..Default::default()
            });
            let memory = m.memory.map(|s| {
                let usage = s.usage.unwrap_or_default();
                Memory {
                    usage: usage.usage,
                    limit: limit(usage.limit),
                    working_set: usage.usage.saturating_sub(s.total_inactive_file),
                    rss: s.total_rss,
                    cache: s.total_cache,
                    mapped_file: s.total_mapped_file,
                    active_file: s.total_active_file,
                    inactive_file: s.total_inactive_file,
                    page_faults: s.total_pg_fault,
                    major_page_faults: s.total_pg_maj_fault,
                    max_usage: Some(usage.max),
                    failcnt: Some(usage.failcnt),
                    swap: s.swap.map(|w| w.usage),
                    oom_kills: None,
                }
            });
            Some(Usage {
                timestamp,
                cpu,
                memory,
                pids: m.pids.map(|p| p.current),
                pressure: None,
            })
        }
        "io.containerd.cgroups.v2.Metrics" => {
            let m = CgroupsV2Metrics::decode(value).ok()?;
            let cpu = m.cpu.map(|c| Cpu {
                usage_ns: c.usage_usec * 1000,
                user_ns: Some(c.user_usec * 1000),
                system_ns: Some(c.system_usec * 1000),
                periods: Some(c.nr_periods),
                throttled_periods: Some(c.nr_throttled),
                throttled_ns: Some(c.throttled_usec * 1000),
            });
            let memory = m.memory.map(|s| Memory {
                usage: s.usage,
                limit: limit(s.usage_limit),
                working_set: s.usage.saturating_sub(s.inactive_file),
                rss: s.anon,
                cache: s.file,
                mapped_file: s.file_mapped,
                active_file: s.active_file,
                inactive_file: s.inactive_file,
                page_faults: s.pgfault,
                major_page_faults: s.pgmajfault,
                max_usage: (s.max_usage > 0).then_some(s.max_usage),
                failcnt: None,
                swap: Some(s.swap_usage),
                oom_kills: None,
            });
            Some(Usage {
                timestamp,
                cpu,
                memory,
                pids: m.pids.map(|p| p.current),
                pressure: None,
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::containerd::{
        PidsStat, V1CpuStat, V1CpuUsage, V1MemoryEntry, V1MemoryStat, V2CpuStat, V2MemoryStat,
    };

    #[test]
    fn both_cgroup_versions_read_as_the_cgroup_readers_read_them() {
        let v1 = CgroupsV1Metrics {
            pids: Some(PidsStat {
                current: 3,
                limit: 0,
            }),
            cpu: Some(V1CpuStat {
                usage: Some(V1CpuUsage {
                    total: 5_000,
                    kernel: 1_000,
                    user: 4_000,
                }),
            }),
            memory: Some(V1MemoryStat {
                total_rss: 700,
                total_inactive_file: 100,
                usage: Some(V1MemoryEntry {
                    usage: 1_000,
                    limit: u64::MAX,
                    ..Default::default()
                }),
                ..Default::default()
            }),
        };
        let u = decode("io.containerd.cgroups.v1.Metrics", &v1.encode_to_vec(), 9).expect("test");
        assert_eq!(u.cpu.expect("test").usage_ns, 5_000);
        let m = u.memory.expect("test");
        assert_eq!(
            (m.usage, m.working_set, m.rss, m.limit),
            (1_000, 900, 700, None)
        );
        assert_eq!(u.pids, Some(3));
        let v2 = CgroupsV2Metrics {
            pids: None,
            cpu: Some(V2CpuStat {
                usage_usec: 7,
                ..Default::default()
            }),
            memory: Some(V2MemoryStat {
                anon: 40,
                inactive_file: 10,
                usage: 100,
                usage_limit: 4096,
                ..Default::default()
            }),
        };
        let u = decode(
            "type.googleapis.com/io.containerd.cgroups.v2.Metrics",
            &v2.encode_to_vec(),
            9,
        )
        .expect("test");
        assert_eq!(u.cpu.expect("test").usage_ns, 7_000);
        let m = u.memory.expect("test");
        assert_eq!((m.working_set, m.rss, m.limit), (90, 40, Some(4096)));
        assert!(decode("something.Else", &[], 9).is_none());
    }
}
