//! husk's pods and containers as NRI sees them: a pod record to a
//! `PodSandbox`, an OCI spec (with the container's CRI facts) to a
//! `Container`.

use crate::api::nri as api;
use crate::sandbox::manager::SandboxRecord;
use serde_json::Value;

/// A pod, for plugins.
pub fn pod(r: &SandboxRecord) -> api::PodSandbox {
    let mut namespaces = Vec::new();
    for (kind, path) in [("network", &r.netns), ("ipc", &r.ipcns), ("uts", &r.utsns)] {
        if let Some(p) = path {
            namespaces.push(api::LinuxNamespace {
                r#type: kind.into(),
                path: p.display().to_string(),
            });
        }
    }
    api::PodSandbox {
        id: r.id.clone(),
        name: r.name.clone(),
        uid: r.uid.clone(),
        namespace: r.namespace.clone(),
        labels: r.labels.clone().into_iter().collect(),
        annotations: r.annotations.clone().into_iter().collect(),
        runtime_handler: r.runtime_handler.clone(),
        linux: Some(api::LinuxPodSandbox {
            cgroup_parent: r.cgroup_parent.clone(),
            cgroups_path: r.cgroups_path.clone(),
            namespaces,
            ..Default::default()
        }),
        pid: r.pause_pid.max(0) as u32,
        ips: r.ips.clone(),
    }
}

/// The CRI facts of a container that its spec does not hold.
pub struct Facts<'a> {
    pub id: &'a str,
    pub pod_id: &'a str,
    pub name: &'a str,
    pub state: api::ContainerState,
    pub labels: std::collections::HashMap<String, String>,
    pub pid: u32,
    pub created_at: i64,
    pub started_at: i64,
    pub finished_at: i64,
    pub exit_code: i32,
    pub reason: &'a str,
    pub message: &'a str,
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn opt_i64(v: &Value) -> Option<api::OptionalInt64> {
    v.as_i64().map(|value| api::OptionalInt64 { value })
}

fn opt_u64(v: &Value) -> Option<api::OptionalUInt64> {
    v.as_u64().map(|value| api::OptionalUInt64 { value })
}

/// A container, for plugins: what its spec says, with `f`.
pub fn container(f: &Facts<'_>, spec: &Value) -> api::Container {
    let p = &spec["process"];
    let l = &spec["linux"];
    let r = &l["resources"];
    let mounts = spec["mounts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| api::Mount {
            destination: m["destination"].as_str().unwrap_or("").into(),
            r#type: m["type"].as_str().unwrap_or("").into(),
            source: m["source"].as_str().unwrap_or("").into(),
            options: strings(&m["options"]),
        })
        .collect();
    let rlimits = p["rlimits"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|x| api::PosixRlimit {
            r#type: x["type"].as_str().unwrap_or("").into(),
            hard: x["hard"].as_u64().unwrap_or(0),
            soft: x["soft"].as_u64().unwrap_or(0),
        })
        .collect();
    let namespaces = l["namespaces"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|n| api::LinuxNamespace {
            r#type: n["type"].as_str().unwrap_or("").into(),
            path: n["path"].as_str().unwrap_or("").into(),
        })
        .collect();
    let devices = l["devices"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|d| api::LinuxDevice {
            path: d["path"].as_str().unwrap_or("").into(),
            r#type: d["type"].as_str().unwrap_or("").into(),
            major: d["major"].as_i64().unwrap_or(0),
            minor: d["minor"].as_i64().unwrap_or(0),
            file_mode: d["fileMode"]
                .as_u64()
                .map(|v| api::OptionalFileMode { value: v as u32 }),
            uid: d["uid"]
                .as_u64()
                .map(|v| api::OptionalUInt32 { value: v as u32 }),
            gid: d["gid"]
                .as_u64()
                .map(|v| api::OptionalUInt32 { value: v as u32 }),
        })
        .collect();
    let resources = api::LinuxResources {
        memory: Some(api::LinuxMemory {
            limit: opt_i64(&r["memory"]["limit"]),
            reservation: opt_i64(&r["memory"]["reservation"]),
            swap: opt_i64(&r["memory"]["swap"]),
            swappiness: opt_u64(&r["memory"]["swappiness"]),
            ..Default::default()
        }),
        cpu: Some(api::LinuxCpu {
            shares: opt_u64(&r["cpu"]["shares"]),
            quota: opt_i64(&r["cpu"]["quota"]),
            period: opt_u64(&r["cpu"]["period"]),
            cpus: r["cpu"]["cpus"].as_str().unwrap_or("").into(),
            mems: r["cpu"]["mems"].as_str().unwrap_or("").into(),
            ..Default::default()
        }),
        hugepage_limits: r["hugepageLimits"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|h| api::HugepageLimit {
                page_size: h["pageSize"].as_str().unwrap_or("").into(),
                limit: h["limit"].as_u64().unwrap_or(0),
            })
            .collect(),
        unified: r["unified"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                    .collect()
            })
            .unwrap_or_default(),
        pids: r["pids"]["limit"]
            .as_i64()
            .map(|limit| api::LinuxPids { limit }),
        ..Default::default()
    };
    let user = &p["user"];
    api::Container {
        id: f.id.into(),
        pod_sandbox_id: f.pod_id.into(),
        name: f.name.into(),
        state: f.state as i32,
        labels: f.labels.clone(),
        annotations: spec["annotations"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                    .collect()
            })
            .unwrap_or_default(),
        args: strings(&p["args"]),
        env: strings(&p["env"]),
        mounts,
        linux: Some(api::LinuxContainer {
            namespaces,
            devices,
            resources: Some(resources),
            oom_score_adj: p["oomScoreAdj"]
                .as_i64()
                .map(|value| api::OptionalInt { value }),
            cgroups_path: l["cgroupsPath"].as_str().unwrap_or("").into(),
            sysctl: l["sysctl"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                        .collect()
                })
                .unwrap_or_default(),
            ..Default::default()
        }),
        pid: f.pid,
        rlimits,
        created_at: f.created_at,
        started_at: f.started_at,
        finished_at: f.finished_at,
        exit_code: f.exit_code,
        status_reason: f.reason.into(),
        status_message: f.message.into(),
        user: user["uid"].as_u64().map(|uid| api::User {
            uid: uid as u32,
            gid: user["gid"].as_u64().unwrap_or(0) as u32,
            additional_gids: user["additionalGids"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|g| g.as_u64().map(|g| g as u32))
                .collect(),
        }),
        ..Default::default()
    }
}
