//! A CRI `LinuxContainerResources` in the OCI runtime spec's form
//! (`linux.resources`): what the spec builder, UpdateContainerResources,
//! the systemd driver's unit properties and PodSandboxStatus all write.

use crate::api::cri::LinuxContainerResources;
use serde_json::{json, Value};

/// Sets the cgroup limits of `res` in an OCI `linux.resources` object
/// (devices are left as they are); unset CRI values leave no key.
pub fn set_resources(resources: &mut Value, res: &LinuxContainerResources) {
    for k in ["cpu", "memory", "hugepageLimits", "unified"] {
        if let Some(o) = resources.as_object_mut() {
            o.remove(k);
        }
    }
    let mut cpu = serde_json::Map::new();
    if res.cpu_period > 0 {
        cpu.insert("period".into(), json!(res.cpu_period));
    }
    if res.cpu_quota > 0 {
        cpu.insert("quota".into(), json!(res.cpu_quota));
    }
    if res.cpu_shares > 0 {
        cpu.insert("shares".into(), json!(res.cpu_shares));
    }
    if !res.cpuset_cpus.is_empty() {
        cpu.insert("cpus".into(), json!(res.cpuset_cpus));
    }
    if !res.cpuset_mems.is_empty() {
        cpu.insert("mems".into(), json!(res.cpuset_mems));
    }
    if !cpu.is_empty() {
        resources["cpu"] = Value::Object(cpu);
    }
    if res.memory_limit_in_bytes > 0 {
        resources["memory"] = json!({"limit": res.memory_limit_in_bytes});
        if res.memory_swap_limit_in_bytes > 0 {
            resources["memory"]["swap"] = json!(res.memory_swap_limit_in_bytes);
        }
    }
    if !res.hugepage_limits.is_empty() {
        resources["hugepageLimits"] = json!(res
            .hugepage_limits
            .iter()
            .map(|h| json!({"pageSize": h.page_size, "limit": h.limit}))
            .collect::<Vec<_>>());
    }
    if !res.unified.is_empty() {
        resources["unified"] = json!(res.unified);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_values_leave_no_key_and_devices_stay() {
        let mut r = json!({"devices": [{"allow": false, "access": "rwm"}], "cpu": {"shares": 2}});
        set_resources(
            &mut r,
            &LinuxContainerResources {
                cpu_quota: 50_000,
                cpu_period: 100_000,
                memory_limit_in_bytes: 1 << 20,
                ..Default::default()
            },
        );
        assert_eq!(
            r,
            json!({"devices": [{"allow": false, "access": "rwm"}],
                   "cpu": {"period": 100_000, "quota": 50_000},
                   "memory": {"limit": 1 << 20}})
        );
    }
}
