//! A plugin's Linux resources, as the OCI spec's `linux.resources`: memory,
//! CPU, hugepages, the unified map, pids, device rules, and the block I/O
//! and RDT classes.

use super::{list, obj, unmarked, unsupported, Node, Owners};
use crate::api::nri as api;
use serde_json::{json, Value};

fn set(
    spec: &mut Value,
    path: &[&str],
    key: &str,
    v: Value,
    field: &'static str,
    plugin: &str,
    owners: &mut Owners,
) -> Result<(), String> {
    owners.claim(field, "", plugin)?;
    obj(spec, path).insert(key.into(), v);
    Ok(())
}

pub(super) fn resources(
    spec: &mut Value,
    r: &api::LinuxResources,
    plugin: &str,
    owners: &mut Owners,
    node: &Node<'_>,
) -> Result<(), String> {
    let mem = &["linux", "resources", "memory"][..];
    if let Some(m) = &r.memory {
        for (key, val, field) in [
            (
                "limit",
                m.limit.as_ref().map(|v| json!(v.value)),
                "MemLimit",
            ),
            (
                "reservation",
                m.reservation.as_ref().map(|v| json!(v.value)),
                "MemReservation",
            ),
            (
                "swap",
                m.swap.as_ref().map(|v| json!(v.value)),
                "MemSwapLimit",
            ),
            (
                "swappiness",
                m.swappiness.as_ref().map(|v| json!(v.value)),
                "MemSwappiness",
            ),
            (
                "disableOOMKiller",
                m.disable_oom_killer.as_ref().map(|v| json!(v.value)),
                "MemDisableOomKiller",
            ),
        ] {
            if let Some(v) = val {
                set(spec, mem, key, v, field, plugin, owners)?;
            }
        }
        if m.kernel.is_some() || m.kernel_tcp.is_some() {
            return Err(unsupported("kernel memory limits", plugin));
        }
    }
    let cpu = &["linux", "resources", "cpu"][..];
    if let Some(c) = &r.cpu {
        for (key, val, field) in [
            (
                "shares",
                c.shares.as_ref().map(|v| json!(v.value)),
                "CPUShares",
            ),
            (
                "quota",
                c.quota.as_ref().map(|v| json!(v.value)),
                "CPUQuota",
            ),
            (
                "period",
                c.period.as_ref().map(|v| json!(v.value)),
                "CPUPeriod",
            ),
            (
                "realtimeRuntime",
                c.realtime_runtime.as_ref().map(|v| json!(v.value)),
                "CPURealtimeRuntime",
            ),
            (
                "realtimePeriod",
                c.realtime_period.as_ref().map(|v| json!(v.value)),
                "CPURealtimePeriod",
            ),
            (
                "cpus",
                (!c.cpus.is_empty()).then(|| json!(c.cpus)),
                "CPUSetCPUs",
            ),
            (
                "mems",
                (!c.mems.is_empty()).then(|| json!(c.mems)),
                "CPUSetMems",
            ),
        ] {
            if let Some(v) = val {
                set(spec, cpu, key, v, field, plugin, owners)?;
            }
        }
    }
    for h in &r.hugepage_limits {
        owners.claim("HugepageLimits", &h.page_size, plugin)?;
        let l = list(spec, &["linux", "resources", "hugepageLimits"]);
        l.retain(|x| x["pageSize"] != h.page_size.as_str());
        l.push(json!({"pageSize": h.page_size, "limit": h.limit}));
    }
    for (k, v) in &r.unified {
        let (key, remove) = unmarked(k);
        owners.claim("CgroupsUnified", key, plugin)?;
        let u = obj(spec, &["linux", "resources", "unified"]);
        if remove {
            u.remove(key);
        } else {
            u.insert(key.into(), json!(v));
        }
    }
    if let Some(p) = &r.pids {
        set(
            spec,
            &["linux", "resources", "pids"],
            "limit",
            json!(p.limit),
            "PidsLimit",
            plugin,
            owners,
        )?;
    }
    for d in &r.devices {
        list(spec, &["linux", "resources", "devices"]).push(json!({
            "allow": d.allow,
            "type": d.r#type,
            "major": d.major.as_ref().map(|v| v.value),
            "minor": d.minor.as_ref().map(|v| v.value),
            "access": d.access,
        }));
    }
    if let Some(class) = &r.blockio_class {
        owners.claim("BlockioClass", "", plugin)?;
        // An empty class clears the block I/O limits, as containerd's
        // generator does; a named one is the node's class (containerd's
        // words for one its table lacks).
        if class.value.is_empty() {
            obj(spec, &["linux", "resources"]).remove("blockIO");
        } else {
            let b = (node.blockio)(&class.value).map_err(|e| {
                format!("plugin {plugin:?}: failed to adjust BlockIO class in OCI Spec: {e}")
            })?;
            obj(spec, &["linux", "resources"]).insert("blockIO".into(), b);
        }
    }
    if let Some(class) = &r.rdt_class {
        owners.claim("RdtClass", "", plugin)?;
        // A class is the container's resctrl group, as containerd maps it.
        if class.value.is_empty() {
            obj(spec, &["linux"]).remove("intelRdt");
        } else {
            obj(spec, &["linux", "intelRdt"]).insert("closID".into(), json!(class.value));
        }
    }
    Ok(())
}
