//! A plugin's Linux adjustments, as the OCI spec's `linux` and `process`
//! fields: devices, resources, the OOM score, sysctls, I/O priority, the
//! scheduling policy, seccomp, namespaces, network devices, RDT and the
//! memory policy, each as containerd's NRI generator writes it.

use super::{list, obj, resources::resources, unmarked, unsupported, Node, Owners};
use crate::api::nri as api;
use serde_json::{json, Map, Value};

pub(super) fn linux(
    spec: &mut Value,
    l: &api::LinuxContainerAdjustment,
    plugin: &str,
    owners: &mut Owners,
    node: &Node<'_>,
) -> Result<(), String> {
    // The cgroup is husk's to place: its stats, updates, OOM counts and the
    // container's own cgroup view all follow the path husk chose.
    if !l.cgroups_path.is_empty() {
        return Err(unsupported("the cgroups path", plugin));
    }
    devices(spec, &l.devices, plugin, owners)?;
    if let Some(r) = &l.resources {
        resources(spec, r, plugin, owners, node)?;
    }
    if let Some(o) = &l.oom_score_adj {
        owners.claim("OomScoreAdj", "", plugin)?;
        obj(spec, &["process"]).insert("oomScoreAdj".into(), json!(o.value));
    }
    for (k, v) in &l.sysctl {
        let (key, remove) = unmarked(k);
        owners.claim("Sysctl", key, plugin)?;
        let s = obj(spec, &["linux", "sysctl"]);
        if remove {
            s.remove(key);
        } else {
            s.insert(key.into(), json!(v));
        }
    }
    if let Some(p) = &l.io_priority {
        owners.claim("IoPriority", "", plugin)?;
        let class = match api::IoPrioClass::try_from(p.class) {
            Ok(api::IoPrioClass::IoprioClassRt) => Some("IOPRIO_CLASS_RT"),
            Ok(api::IoPrioClass::IoprioClassBe) => Some("IOPRIO_CLASS_BE"),
            Ok(api::IoPrioClass::IoprioClassIdle) => Some("IOPRIO_CLASS_IDLE"),
            _ => None,
        };
        let process = obj(spec, &["process"]);
        match class {
            Some(c) => process.insert(
                "ioPriority".into(),
                json!({"class": c, "priority": p.priority}),
            ),
            None => process.remove("ioPriority"),
        };
    }
    if let Some(s) = &l.scheduler {
        owners.claim("LinuxSched", "", plugin)?;
        scheduler(spec, s);
    }
    if let Some(p) = &l.seccomp_policy {
        owners.claim("SeccompPolicy", "", plugin)?;
        obj(spec, &["linux"]).insert("seccomp".into(), seccomp(p));
    }
    for n in &l.namespaces {
        let (kind, remove) = unmarked(&n.r#type);
        owners.claim("Namespace", kind, plugin)?;
        let ns = list(spec, &["linux", "namespaces"]);
        ns.retain(|x| x["type"] != kind);
        if !remove {
            let mut j = json!({"type": kind});
            if !n.path.is_empty() {
                j["path"] = json!(n.path);
            }
            ns.push(j);
        }
    }
    for (host, dev) in &l.net_devices {
        let (host, remove) = unmarked(host);
        owners.claim("LinuxNetDevices", host, plugin)?;
        let devs = obj(spec, &["linux", "netDevices"]);
        if remove {
            devs.remove(host);
        } else {
            devs.insert(host.into(), json!({"name": dev.name}));
        }
    }
    if let Some(r) = &l.rdt {
        rdt(spec, r, plugin, owners)?;
    }
    if let Some(m) = &l.memory_policy {
        owners.claim("MemoryPolicy", "", plugin)?;
        let mode = api::MpolMode::try_from(m.mode)
            .map_err(|_| format!("plugin {plugin:?}: unknown memory policy mode {}", m.mode))?;
        let mut j = json!({"mode": mode.as_str_name()});
        if !m.nodes.is_empty() {
            j["nodes"] = json!(m.nodes);
        }
        let flags = m
            .flags
            .iter()
            .map(|f| {
                api::MpolFlag::try_from(*f)
                    .map(|f| f.as_str_name())
                    .map_err(|_| format!("plugin {plugin:?}: unknown memory policy flag {f}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if !flags.is_empty() {
            j["flags"] = json!(flags);
        }
        obj(spec, &["linux"]).insert("memoryPolicy".into(), j);
    }
    Ok(())
}

/// Device nodes, each with the cgroup rule that lets the container use it.
fn devices(
    spec: &mut Value,
    devices: &[api::LinuxDevice],
    plugin: &str,
    owners: &mut Owners,
) -> Result<(), String> {
    for d in devices {
        let (path, remove) = unmarked(&d.path);
        owners.claim("Devices", path, plugin)?;
        let devs = list(spec, &["linux", "devices"]);
        devs.retain(|x| x["path"] != path);
        if remove {
            continue;
        }
        let mut j = json!({"path": path, "type": d.r#type, "major": d.major, "minor": d.minor});
        if let Some(m) = &d.file_mode {
            j["fileMode"] = json!(m.value);
        }
        if let Some(u) = &d.uid {
            j["uid"] = json!(u.value);
        }
        if let Some(g) = &d.gid {
            j["gid"] = json!(g.value);
        }
        devs.push(j);
        // NRI's access string: read and write, mknod for a block device.
        let access = if d.r#type == "b" { "rwm" } else { "rw" };
        list(spec, &["linux", "resources", "devices"]).push(json!({
            "allow": true, "type": d.r#type, "major": d.major, "minor": d.minor, "access": access,
        }));
    }
    Ok(())
}

/// `process.scheduler`; SCHED_NONE takes it away.
fn scheduler(spec: &mut Value, s: &api::LinuxScheduler) {
    let policy = api::LinuxSchedulerPolicy::try_from(s.policy)
        .unwrap_or(api::LinuxSchedulerPolicy::SchedNone);
    let process = obj(spec, &["process"]);
    if policy == api::LinuxSchedulerPolicy::SchedNone {
        process.remove("scheduler");
        return;
    }
    let mut j = json!({"policy": policy.as_str_name()});
    for (k, v) in [("nice", s.nice as i64), ("priority", s.priority as i64)] {
        if v != 0 {
            j[k] = json!(v);
        }
    }
    for (k, v) in [
        ("runtime", s.runtime),
        ("deadline", s.deadline),
        ("period", s.period),
    ] {
        if v != 0 {
            j[k] = json!(v);
        }
    }
    let flags: Vec<&str> = s
        .flags
        .iter()
        .filter_map(|f| api::LinuxSchedulerFlag::try_from(*f).ok())
        .map(|f| f.as_str_name())
        .collect();
    if !flags.is_empty() {
        j["flags"] = json!(flags);
    }
    process.insert("scheduler".into(), j);
}

/// The spec as husk's own path reads it: libcontainer's spec crate knows
/// two scheduler flags by other names than the OCI spec's
/// (`SCHED_RESET_ON_FORK`, `SCHED_FLAG_D_L_OVERRUN`) and refuses the
/// spec's own, so they are renamed for it (never for an OCI runtime).
pub fn for_libcontainer(spec: &mut Value) {
    let Some(flags) = spec
        .pointer_mut("/process/scheduler/flags")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for f in flags {
        let renamed = match f.as_str() {
            Some("SCHED_FLAG_RESET_ON_FORK") => "SCHED_RESET_ON_FORK",
            Some("SCHED_FLAG_DL_OVERRUN") => "SCHED_FLAG_D_L_OVERRUN",
            _ => continue,
        };
        *f = json!(renamed);
    }
}

/// The whole seccomp policy, replacing the one the pod asked for.
fn seccomp(p: &api::LinuxSeccomp) -> Value {
    let mut j = Map::new();
    j.insert("defaultAction".into(), json!(p.default_action));
    if let Some(e) = &p.default_errno {
        j.insert("defaultErrnoRet".into(), json!(e.value));
    }
    if !p.architectures.is_empty() {
        j.insert("architectures".into(), json!(p.architectures));
    }
    if !p.flags.is_empty() {
        j.insert("flags".into(), json!(p.flags));
    }
    if !p.listener_path.is_empty() {
        j.insert("listenerPath".into(), json!(p.listener_path));
    }
    if !p.listener_metadata.is_empty() {
        j.insert("listenerMetadata".into(), json!(p.listener_metadata));
    }
    let syscalls: Vec<Value> = p
        .syscalls
        .iter()
        .map(|s| {
            let mut c = json!({"names": s.names, "action": s.action});
            if let Some(e) = &s.errno_ret {
                c["errnoRet"] = json!(e.value);
            }
            if !s.args.is_empty() {
                c["args"] = s
                    .args
                    .iter()
                    .map(|a| {
                        json!({"index": a.index, "value": a.value, "valueTwo": a.value_two, "op": a.op})
                    })
                    .collect();
            }
            c
        })
        .collect();
    if !syscalls.is_empty() {
        j.insert("syscalls".into(), json!(syscalls));
    }
    Value::Object(j)
}

/// `linux.intelRdt`: taken away, or its CLOS, schemata and monitoring set.
fn rdt(
    spec: &mut Value,
    r: &api::LinuxRdt,
    plugin: &str,
    owners: &mut Owners,
) -> Result<(), String> {
    if r.remove {
        obj(spec, &["linux"]).remove("intelRdt");
    }
    if let Some(c) = &r.clos_id {
        owners.claim("RdtClosID", "", plugin)?;
        obj(spec, &["linux", "intelRdt"]).insert("closID".into(), json!(c.value));
    }
    if let Some(s) = &r.schemata {
        owners.claim("RdtSchemata", "", plugin)?;
        obj(spec, &["linux", "intelRdt"]).insert("schemata".into(), json!(s.value));
    }
    if let Some(m) = &r.enable_monitoring {
        owners.claim("RdtEnableMonitoring", "", plugin)?;
        obj(spec, &["linux", "intelRdt"]).insert("enableMonitoring".into(), json!(m.value));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::{apply, tests::bare, Owners};
    use crate::api::nri as api;
    use serde_json::json;

    fn linux(l: api::LinuxContainerAdjustment) -> api::ContainerAdjustment {
        api::ContainerAdjustment {
            linux: Some(l),
            ..Default::default()
        }
    }

    #[test]
    fn scheduling_seccomp_namespaces_and_net_devices_reach_the_spec() {
        let mut spec = json!({
            "process": {},
            "linux": {
                "namespaces": [{"type": "pid"}, {"type": "network", "path": "/run/ns/net"}],
                "seccomp": {"defaultAction": "SCMP_ACT_ALLOW"},
            },
        });
        let adj = linux(api::LinuxContainerAdjustment {
            scheduler: Some(api::LinuxScheduler {
                policy: api::LinuxSchedulerPolicy::SchedBatch as i32,
                nice: 5,
                flags: vec![api::LinuxSchedulerFlag::SchedFlagResetOnFork as i32],
                ..Default::default()
            }),
            seccomp_policy: Some(api::LinuxSeccomp {
                default_action: "SCMP_ACT_ERRNO".into(),
                default_errno: Some(api::OptionalUInt32 { value: 1 }),
                architectures: vec!["SCMP_ARCH_X86_64".into()],
                syscalls: vec![api::LinuxSyscall {
                    names: vec!["read".into(), "write".into()],
                    action: "SCMP_ACT_ALLOW".into(),
                    args: vec![api::LinuxSeccompArg {
                        index: 0,
                        value: 1,
                        value_two: 0,
                        op: "SCMP_CMP_GE".into(),
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }),
            namespaces: vec![
                api::LinuxNamespace {
                    r#type: "-pid".into(),
                    path: String::new(),
                },
                api::LinuxNamespace {
                    r#type: "network".into(),
                    path: "/run/other".into(),
                },
            ],
            net_devices: [(
                "dummy7".to_string(),
                api::LinuxNetDevice {
                    name: "netdev0".into(),
                },
            )]
            .into(),
            memory_policy: Some(api::LinuxMemoryPolicy {
                mode: api::MpolMode::MpolBind as i32,
                nodes: "0".into(),
                flags: vec![api::MpolFlag::MpolFStaticNodes as i32],
            }),
            ..Default::default()
        });
        apply(&mut spec, &adj, "10-a", &mut Owners::default(), &bare()).expect("applies");
        assert_eq!(
            spec["process"]["scheduler"],
            json!({"policy": "SCHED_BATCH", "nice": 5, "flags": ["SCHED_FLAG_RESET_ON_FORK"]})
        );
        let sc = &spec["linux"]["seccomp"];
        assert_eq!(sc["defaultAction"], "SCMP_ACT_ERRNO");
        assert_eq!(sc["defaultErrnoRet"], 1);
        assert_eq!(sc["syscalls"][0]["names"], json!(["read", "write"]));
        assert_eq!(sc["syscalls"][0]["args"][0]["op"], "SCMP_CMP_GE");
        assert_eq!(
            spec["linux"]["namespaces"],
            json!([{"type": "network", "path": "/run/other"}])
        );
        assert_eq!(
            spec["linux"]["netDevices"],
            json!({"dummy7": {"name": "netdev0"}})
        );
        assert_eq!(
            spec["linux"]["memoryPolicy"],
            json!({"mode": "MPOL_BIND", "nodes": "0", "flags": ["MPOL_F_STATIC_NODES"]})
        );
        // The spec is one libcontainer reads, its flags renamed for it.
        super::for_libcontainer(&mut spec);
        assert_eq!(
            spec["process"]["scheduler"]["flags"],
            json!(["SCHED_RESET_ON_FORK"])
        );
        let s: libcontainer::oci_spec::runtime::Spec = serde_json::from_value(json!({
            "ociVersion": "1.2.0",
            "root": {"path": "rootfs"},
            "process": {
                "user": {"uid": 0, "gid": 0},
                "cwd": "/",
                "scheduler": spec["process"]["scheduler"].clone(),
            },
            "linux": spec["linux"].clone(),
        }))
        .expect("an OCI spec");
        assert!(s.process().as_ref().expect("process").scheduler().is_some());

        // SCHED_NONE takes the policy away.
        let none = linux(api::LinuxContainerAdjustment {
            scheduler: Some(api::LinuxScheduler::default()),
            ..Default::default()
        });
        apply(&mut spec, &none, "10-a", &mut Owners::default(), &bare()).expect("applies");
        assert!(spec["process"].get("scheduler").is_none());
    }

    #[test]
    fn rdt_and_block_io_classes_as_containerd_maps_them() {
        let mut spec = json!({"linux": {"resources": {"blockIO": {"weight": 10}}}});
        let adj = linux(api::LinuxContainerAdjustment {
            resources: Some(api::LinuxResources {
                rdt_class: Some(api::OptionalString {
                    value: "gold".into(),
                }),
                blockio_class: Some(api::OptionalString::default()),
                ..Default::default()
            }),
            ..Default::default()
        });
        apply(&mut spec, &adj, "10-a", &mut Owners::default(), &bare()).expect("applies");
        assert_eq!(spec["linux"]["intelRdt"], json!({"closID": "gold"}));
        assert!(spec["linux"]["resources"].get("blockIO").is_none());
        let rdt = linux(api::LinuxContainerAdjustment {
            rdt: Some(api::LinuxRdt {
                remove: true,
                schemata: Some(api::OptionalRepeatedString {
                    value: vec!["L3:0=ff".into()],
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        apply(&mut spec, &rdt, "20-b", &mut Owners::default(), &bare()).expect("applies");
        assert_eq!(spec["linux"]["intelRdt"], json!({"schemata": ["L3:0=ff"]}));
        // A named block I/O class needs a class table husk has not.
        let named = linux(api::LinuxContainerAdjustment {
            resources: Some(api::LinuxResources {
                blockio_class: Some(api::OptionalString {
                    value: "slow".into(),
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        let e = apply(&mut spec, &named, "10-a", &mut Owners::default(), &bare())
            .expect_err("no class table");
        assert!(e.contains("10-a") && e.contains("\"slow\""), "{e}");
    }

    #[test]
    fn two_plugins_on_a_namespace_conflict() {
        let mut spec = json!({});
        let mut owners = Owners::default();
        let ns = |p: &str| {
            linux(api::LinuxContainerAdjustment {
                namespaces: vec![api::LinuxNamespace {
                    r#type: "network".into(),
                    path: p.into(),
                }],
                ..Default::default()
            })
        };
        apply(&mut spec, &ns("/a"), "10-a", &mut owners, &bare()).expect("first");
        let e = apply(&mut spec, &ns("/b"), "20-b", &mut owners, &bare()).expect_err("conflict");
        assert_eq!(
            e,
            "plugins \"20-b\" and \"10-a\" both tried to set Namespace network"
        );
    }
}
