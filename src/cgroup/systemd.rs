//! The systemd driver's side that runs in the server: reaching systemd
//! over D-Bus ([`probe`]), live resource changes as unit properties
//! ([`set_properties`]), and stopping a container's scope ([`stop_unit`]).
//! The scopes themselves are made by libcontainer's systemd manager in the
//! shim, which speaks the same D-Bus client.
//!
//! systemd owns the files behind its properties (`memory.max`,
//! `memory.high`, `memory.swap.max`, `cpu.max`, `cpu.weight`,
//! `cpuset.cpus`, `pids.max`, …): it writes them again from the unit on
//! every `systemctl daemon-reload` and restart, so a limit written to the
//! file alone would be lost. Those limits go through systemd
//! (MemoryMax, MemorySwapMax, MemoryHigh, CPUQuota, CPUWeight,
//! AllowedCPUs, TasksMax, …). What systemd has no property for
//! ([`leftovers`]: hugetlb limits, other `unified` keys) is written to the
//! delegated scope's files, which systemd leaves alone.

use super::resources::ResourceError;
use crate::api::cri::LinuxContainerResources;
use libcgroups::common::{CgroupManager, ControllerOpt};
use libcgroups::systemd::manager::Manager;
use libcontainer::oci_spec::runtime::LinuxResources;
use std::path::PathBuf;
use std::time::Duration;

/// The `unified` keys that libcontainer's systemd manager turns into
/// unit properties; every other key is written to the scope's file.
const AS_PROPERTIES: &[&str] = &[
    "cpu.weight",
    "cpu.max",
    "cpuset.cpus",
    "cpuset.mems",
    "memory.min",
    "memory.low",
    "memory.high",
    "memory.max",
    "pids.max",
];

/// The controllers systemd enables down to a scope on its own (for the
/// accounting and properties of its units); any other (hugetlb, misc,
/// rdma) reaches a scope only when the slices above enable it.
pub const ENABLED_BY_SYSTEMD: &[&str] = &["cpu", "cpuset", "io", "memory", "pids"];

fn manager(cgroups_path: &str, name: &str) -> Result<Manager, String> {
    Manager::new(
        PathBuf::from("/sys/fs/cgroup"),
        PathBuf::from(cgroups_path),
        name.to_string(),
        true,
        Duration::from_secs(5),
    )
    .map_err(|e| e.to_string())
}

/// Connects to systemd on the system bus and asks it for its cgroup root.
pub fn probe() -> Result<(), String> {
    manager("husk.slice:husk:probe", "probe").map(|_| ())
}

/// The part of `r` that systemd has no property for.
pub fn leftovers(r: &LinuxContainerResources) -> LinuxContainerResources {
    LinuxContainerResources {
        hugepage_limits: r.hugepage_limits.clone(),
        unified: r
            .unified
            .iter()
            .filter(|(k, _)| !AS_PROPERTIES.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        ..Default::default()
    }
}

/// At create, the [`leftovers`] of `res` written to the scope that the
/// shim had libcontainer make for `cgroups_path` (its systemd manager
/// sets only properties). Nothing to do for a cgroupfs path.
pub fn write_leftovers(
    cgroups_path: &str,
    res: Option<&LinuxContainerResources>,
) -> Result<(), ResourceError> {
    let Some(res) = res else { return Ok(()) };
    if unit_of(cgroups_path).is_none() {
        return Ok(());
    }
    let left = leftovers(res);
    if left.hugepage_limits.is_empty() && left.unified.is_empty() {
        return Ok(());
    }
    super::resources::apply(super::layout::Layout::host(), cgroups_path, &left)
}

/// `r` without its [`leftovers`]: what becomes unit properties.
pub fn as_properties(r: &LinuxContainerResources) -> LinuxContainerResources {
    let mut p = r.clone();
    p.hugepage_limits.clear();
    p.unified.retain(|k, _| AS_PROPERTIES.contains(&k.as_str()));
    p
}

/// Sets the set fields of `r` (an update: zero fields unchanged) as
/// properties of the scope of `cgroups_path` (`slice:husk:id`).
pub fn set_properties(
    cgroups_path: &str,
    id: &str,
    r: &LinuxContainerResources,
) -> Result<(), ResourceError> {
    // An update may name swap without the memory limit it is counted on.
    if r.memory_limit_in_bytes == 0 && r.memory_swap_limit_in_bytes != 0 {
        return Err(ResourceError::Invalid(
            "memory_swap_limit_in_bytes needs memory_limit_in_bytes in the same update (systemd cgroup driver)"
                .into(),
        ));
    }
    let mut res = serde_json::json!({});
    crate::oci::set_resources(&mut res, r);
    let oci: LinuxResources =
        serde_json::from_value(res).map_err(|e| ResourceError::Invalid(e.to_string()))?;
    let m = manager(cgroups_path, id).map_err(ResourceError::Systemd)?;
    m.apply(&ControllerOpt {
        resources: &oci,
        disable_oom_killer: false,
        oom_score_adj: None,
        freezer_state: None,
    })
    .map_err(|e| {
        ResourceError::Systemd(format!(
            "set the properties of {}: {e}",
            unit_name(cgroups_path)
        ))
    })
}

/// Stops the scope of `cgroups_path` if systemd still has it (its
/// processes are killed); a scope already gone is fine.
pub fn stop_unit(cgroups_path: &str) -> Result<(), String> {
    if unit_of(cgroups_path).is_none() {
        return Ok(());
    }
    manager(cgroups_path, "stop")?
        .remove()
        .map_err(|e| format!("stop {}: {e}", unit_name(cgroups_path)))
}

fn unit_name(cgroups_path: &str) -> String {
    unit_of(cgroups_path).unwrap_or_else(|| cgroups_path.to_string())
}

/// The systemd unit of an OCI cgroups path (`husk-<id>.scope`), None for a
/// cgroupfs path.
pub fn unit_of(cgroups_path: &str) -> Option<String> {
    match cgroups_path.split(':').collect::<Vec<_>>().as_slice() {
        [_, prefix, name] => Some(format!("{prefix}-{name}.scope")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_systemd_cgroups_path_names_its_scope() {
        assert_eq!(unit_of("a.slice:husk:c").as_deref(), Some("husk-c.scope"));
        assert_eq!(unit_of("/p/c"), None);
    }

    #[test]
    fn only_what_systemd_cannot_say_is_written_to_files() {
        let r = LinuxContainerResources {
            memory_limit_in_bytes: 1 << 26,
            cpu_quota: 25_000,
            hugepage_limits: vec![crate::api::cri::HugepageLimit {
                page_size: "2MB".into(),
                limit: 0,
            }],
            unified: [
                ("memory.high".to_string(), "1000000".to_string()),
                ("memory.oom.group".to_string(), "1".to_string()),
            ]
            .into_iter()
            .collect(),
            ..Default::default()
        };
        let l = leftovers(&r);
        assert_eq!(l.memory_limit_in_bytes, 0);
        assert_eq!(l.hugepage_limits.len(), 1);
        assert_eq!(l.unified.keys().collect::<Vec<_>>(), ["memory.oom.group"]);
        let p = as_properties(&r);
        assert_eq!((p.memory_limit_in_bytes, p.cpu_quota), (1 << 26, 25_000));
        assert!(p.hugepage_limits.is_empty());
        assert_eq!(p.unified.keys().collect::<Vec<_>>(), ["memory.high"]);
    }
}
