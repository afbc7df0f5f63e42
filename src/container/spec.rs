//! The OCI runtime spec of an application container, from the CRI
//! ContainerConfig, the image's config and the pod's sandbox.
//!
//! - Command: `command` replaces the image's Entrypoint *and* drops its Cmd;
//!   `args` replaces Cmd. Env: the image's, then the config's (same key:
//!   the config wins). Working dir: the config's, else the image's, else `/`.
//! - The process joins the pod's network, IPC and UTS namespaces, and its
//!   PID namespace when the pod shares one; it gets its own mount namespace.
//! - Security: the default capability set with add/drop (`ALL` honoured),
//!   privileged = every capability, no masked or read-only paths and a
//!   writable sysfs; no_new_privs; read-only rootfs.
//! - Resources map to `linux.resources`; `oom_score_adj` is clamped as for
//!   the sandbox.

use super::context::{ImageDefaults, PodContext};
pub use super::mounts::{devices, mounts};
use super::user::Identity;
use super::SpecError;
use crate::api::cri::{ContainerConfig, LinuxContainerResources, NamespaceMode};
use crate::sandbox::spec::{clamp_oom_score_adj, DEFAULT_CAPS, MASKED_PATHS, READONLY_PATHS};
use serde_json::{json, Value};

/// Every capability the kernel knows (as of Linux 6.x).
pub const ALL_CAPS: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",
    "CAP_NET_RAW",
    "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN",
    "CAP_SYS_BOOT",
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG",
    "CAP_MKNOD",
    "CAP_LEASE",
    "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN",
    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",
    "CAP_AUDIT_READ",
    "CAP_PERFMON",
    "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE",
];

/// The capabilities this process holds (its effective set): what
/// "privileged" and "ALL" can grant, as containerd's
/// WithAllCurrentCapabilities does. A node without, say, CAP_SYS_RESOURCE
/// cannot hand it to a container. `ALL_CAPS` is in kernel bit order.
pub fn current_caps() -> Vec<String> {
    let eff = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("CapEff:"))
                .and_then(|l| u64::from_str_radix(l.split_whitespace().nth(1)?, 16).ok())
        })
        .unwrap_or(u64::MAX);
    ALL_CAPS
        .iter()
        .enumerate()
        .filter(|(bit, _)| eff & (1u64 << bit) != 0)
        .map(|(_, c)| c.to_string())
        .collect()
}

/// CRI `command`/`args` over the image's Entrypoint/Cmd.
pub fn process_args(c: &ContainerConfig, img: &ImageDefaults) -> Result<Vec<String>, SpecError> {
    let args = if !c.command.is_empty() {
        c.command.iter().chain(&c.args).cloned().collect::<Vec<_>>()
    } else {
        let cmd = if c.args.is_empty() { &img.cmd } else { &c.args };
        img.entrypoint.iter().chain(cmd).cloned().collect()
    };
    if args.is_empty() {
        return Err(SpecError(
            "no command specified: neither the config nor the image gives one".into(),
        ));
    }
    Ok(args)
}

/// The image's env then the config's; the config wins per key; PATH
/// ensured. A value that is not UTF-8 (the CRI carries bytes) cannot go
/// into the OCI spec's strings: InvalidArgument naming its key.
pub fn process_env(c: &ContainerConfig, img: &ImageDefaults) -> Result<Vec<String>, SpecError> {
    let mut env: Vec<(String, String)> = Vec::new();
    let mut set = |k: &str, v: &str| match env.iter_mut().find(|(x, _)| x == k) {
        Some(e) => e.1 = v.to_string(),
        None => env.push((k.to_string(), v.to_string())),
    };
    for e in &img.env {
        let (k, v) = e.split_once('=').unwrap_or((e.as_str(), ""));
        set(k, v);
    }
    for kv in &c.envs {
        let v = std::str::from_utf8(&kv.value).map_err(|_| {
            SpecError(format!(
                "the value of environment variable {:?} is not UTF-8",
                kv.key
            ))
        })?;
        set(&kv.key, v);
    }
    if !env.iter().any(|(k, _)| k == "PATH") {
        env.push((
            "PATH".into(),
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
        ));
    }
    Ok(env.into_iter().map(|(k, v)| format!("{k}={v}")).collect())
}

/// HOME from the user's passwd entry when the environment has none, so
/// that libcontainer's init never looks the user up itself (it would
/// read the image's passwd with glibc, unbounded, as the container's
/// user is being set).
fn with_home(mut env: Vec<String>, home: &str) -> Vec<String> {
    if !env.iter().any(|e| e.starts_with("HOME=")) {
        env.push(format!("HOME={home}"));
    }
    env
}

fn norm_cap(c: &str) -> String {
    let up = c.to_ascii_uppercase();
    if up.starts_with("CAP_") || up == "ALL" {
        up
    } else {
        format!("CAP_{up}")
    }
}

/// Default capabilities with CRI add/drop applied (`ALL` in either list).
pub fn capabilities(
    add: &[String],
    drop: &[String],
    privileged: bool,
) -> Result<Vec<String>, SpecError> {
    let held = current_caps();
    if privileged {
        return Ok(held);
    }
    let add: Vec<String> = add.iter().map(|c| norm_cap(c)).collect();
    let drop: Vec<String> = drop.iter().map(|c| norm_cap(c)).collect();
    for c in add.iter().chain(&drop) {
        if c != "ALL" && !ALL_CAPS.contains(&c.as_str()) {
            return Err(SpecError(format!("unknown capability {c:?}")));
        }
    }
    let mut caps: Vec<String> = if add.iter().any(|c| c == "ALL") {
        held.clone()
    } else {
        let mut v: Vec<String> = DEFAULT_CAPS.iter().map(|s| s.to_string()).collect();
        for c in &add {
            if !v.contains(c) {
                v.push(c.clone());
            }
        }
        v
    };
    if drop.iter().any(|c| c == "ALL") {
        // Dropping ALL keeps only what was added explicitly.
        caps.retain(|c| add.contains(c));
    } else {
        caps.retain(|c| !drop.contains(c));
    }
    caps.retain(|c| held.contains(c));
    Ok(caps)
}

/// Swap equal to memory (the kubelet's NoSwap) is `memory.swap.max` 0 on
/// v2, but libcontainer's cgroupfs manager writes no zero limits: say it
/// through `unified`, which it applies as given. Only where the kernel
/// accounts swap (the parent has the file). Under the systemd driver
/// libcontainer says it as MemorySwapMax=0 itself.
fn no_swap_on_v2(resources: &mut Value, res: &LinuxContainerResources, cgroups_path: &str) {
    let layout = crate::cgroup::Layout::host();
    if crate::cgroup::systemd::unit_of(cgroups_path).is_some() {
        return;
    }
    let parent = crate::cgroup::paths::parent_fs_path(cgroups_path);
    let accounted = layout
        .dir("memory", &parent)
        .is_some_and(|d| d.join("memory.swap.max").exists());
    if layout.is_v2()
        && accounted
        && res.memory_limit_in_bytes > 0
        && res.memory_swap_limit_in_bytes == res.memory_limit_in_bytes
        && !res.unified.contains_key("memory.swap.max")
    {
        if !resources["unified"].is_object() {
            resources["unified"] = json!({});
        }
        resources["unified"]["memory.swap.max"] = json!("0");
    }
}

/// The whole spec.
pub fn build(
    id: &str,
    c: &ContainerConfig,
    img: &ImageDefaults,
    who: &Identity,
    pod: &PodContext<'_>,
) -> Result<Value, SpecError> {
    let sc = c
        .linux
        .as_ref()
        .and_then(|l| l.security_context.clone())
        .unwrap_or_default();
    // Resources are already validated, and limits of controllers the pods
    // here lack pruned (`cgroup::prune_unsupported`), by the manager.
    let res = c
        .linux
        .as_ref()
        .and_then(|l| l.resources.clone())
        .unwrap_or_default();
    let caps = capabilities(
        sc.capabilities
            .as_ref()
            .map(|x| x.add_capabilities.as_slice())
            .unwrap_or(&[]),
        sc.capabilities
            .as_ref()
            .map(|x| x.drop_capabilities.as_slice())
            .unwrap_or(&[]),
        sc.privileged,
    )?;
    let ns = sc.namespace_options.clone().unwrap_or_default();
    let mut namespaces = vec![json!({"type": "mount"})];
    for (kind, path) in [
        ("network", pod.netns),
        ("ipc", pod.ipcns),
        ("uts", pod.utsns),
    ] {
        if let Some(p) = path {
            namespaces.push(json!({"type": kind, "path": p}));
        }
    }
    match NamespaceMode::try_from(ns.pid) {
        Ok(NamespaceMode::Pod) => namespaces
            .push(json!({"type": "pid", "path": format!("/proc/{}/ns/pid", pod.pause_pid)})),
        Ok(NamespaceMode::Node) => {}
        Ok(NamespaceMode::Target) => {
            return Err(SpecError(
                "namespace_options.pid TARGET is not supported yet".into(),
            ))
        }
        _ => namespaces.push(json!({"type": "pid"})),
    }
    if crate::cgroup::Layout::host().is_v2() {
        // Its own cgroup is the root of what it sees (/proc/self/cgroup
        // reads 0::/; /sys/fs/cgroup is its own cgroup), as runc and crun
        // do on cgroup v2.
        namespaces.push(json!({"type": "cgroup"}));
    }
    let masked: Vec<String> = if sc.privileged {
        Vec::new()
    } else if sc.masked_paths.is_empty() {
        MASKED_PATHS.iter().map(|s| s.to_string()).collect()
    } else {
        sc.masked_paths.clone()
    };
    let mut readonly: Vec<String> = if sc.privileged {
        Vec::new()
    } else if sc.readonly_paths.is_empty() {
        READONLY_PATHS.iter().map(|s| s.to_string()).collect()
    } else {
        sc.readonly_paths.clone()
    };
    if !sc.privileged && !crate::cgroup::Layout::host().is_v2() {
        // The tmpfs that holds the v1 cgroup binds (mounts.rs).
        readonly.push("/sys/fs/cgroup".into());
    }
    let (devices, mut device_rules) = devices(c)?;
    let mut rules = vec![json!({"allow": sc.privileged, "access": "rwm"})];
    rules.append(&mut device_rules);
    let mut resources = json!({ "devices": rules });
    crate::oci::set_resources(&mut resources, &res);
    no_swap_on_v2(&mut resources, &res, pod.cgroups_path);
    let cwd = if !c.working_dir.is_empty() {
        c.working_dir.clone()
    } else if !img.working_dir.is_empty() {
        img.working_dir.clone()
    } else {
        "/".into()
    };
    if !cwd.starts_with('/') {
        return Err(SpecError(format!("working_dir {cwd:?} must be absolute")));
    }
    let oom = clamp_oom_score_adj(res.oom_score_adj as i32);
    // Older kubelets still send the deprecated path form.
    #[allow(deprecated)]
    let legacy_path = sc.seccomp_profile_path.clone();
    let seccomp =
        crate::security::seccomp::profile(sc.seccomp.as_ref(), &legacy_path, sc.privileged, &caps)?;
    #[allow(deprecated)]
    let legacy_apparmor = sc.apparmor_profile.clone();
    let apparmor = crate::security::apparmor::profile(
        id,
        sc.apparmor.as_ref(),
        &legacy_apparmor,
        sc.privileged,
        crate::security::apparmor::host(),
    )?;
    Ok(json!({
        "ociVersion": "1.0.2",
        "process": {
            "apparmorProfile": apparmor,
            "terminal": c.tty,
            "user": {"uid": who.uid, "gid": who.gid, "additionalGids": who.additional_gids},
            "args": process_args(c, img)?,
            "env": with_home(process_env(c, img)?, &who.home),
            "cwd": cwd,
            // Inheritable and ambient pinned empty: left out, libcontainer
            // would keep the server's (the CRI never asks for either).
            "capabilities": {"bounding": caps, "effective": caps, "permitted": caps,
                             "inheritable": [], "ambient": []},
            // Absent rather than false: libcontainer reads any value as "set"
            // and would then load seccomp after dropping CAP_SYS_ADMIN.
            "noNewPrivileges": sc.no_new_privs.then_some(true),
            "oomScoreAdj": oom,
        },
        "root": {"path": "rootfs", "readonly": sc.readonly_rootfs},
        "mounts": mounts(
            c,
            pod,
            img,
            sc.privileged,
            pod.cgroups_path,
        ),
        "annotations": c.annotations,
        "linux": {
            "cgroupsPath": pod.cgroups_path,
            "namespaces": namespaces,
            "devices": devices,
            "seccomp": seccomp,
            "maskedPaths": masked,
            "readonlyPaths": readonly,
            "resources": resources,
            "rootfsPropagation": super::mounts::rootfs_propagation(c),
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::cri::*;
    use std::path::Path;

    fn img() -> ImageDefaults {
        ImageDefaults {
            entrypoint: vec!["/entry".into()],
            cmd: vec!["default-arg".into()],
            env: vec!["PATH=/bin".into(), "A=image".into()],
            working_dir: "/work".into(),
            volumes: vec![("/data".into(), "/var/lib/husk/v/data".into())],
        }
    }

    #[test]
    fn command_and_args_semantics() {
        let mut c = ContainerConfig::default();
        assert_eq!(
            process_args(&c, &img()).expect("image"),
            vec!["/entry", "default-arg"]
        );
        c.args = vec!["x".into()];
        assert_eq!(process_args(&c, &img()).expect("args"), vec!["/entry", "x"]);
        c.command = vec!["/bin/sh".into(), "-c".into()];
        assert_eq!(
            process_args(&c, &img()).expect("command"),
            vec!["/bin/sh", "-c", "x"]
        );
        c.args.clear();
        assert_eq!(
            process_args(&c, &img()).expect("command drops Cmd"),
            vec!["/bin/sh", "-c"]
        );
        assert!(process_args(&ContainerConfig::default(), &ImageDefaults::default()).is_err());
    }

    #[test]
    fn env_config_wins() {
        let c = ContainerConfig {
            envs: vec![
                KeyValue {
                    key: "A".into(),
                    value: "config".into(),
                },
                KeyValue {
                    key: "B".into(),
                    value: "b".into(),
                },
            ],
            ..Default::default()
        };
        assert_eq!(
            process_env(&c, &img()).expect("env"),
            vec!["PATH=/bin", "A=config", "B=b"]
        );
        assert!(
            process_env(&ContainerConfig::default(), &ImageDefaults::default()).expect("env")[0]
                .starts_with("PATH=")
        );
        let bad = ContainerConfig {
            envs: vec![KeyValue {
                key: "X".into(),
                value: vec![0xff, 0xfe],
            }],
            ..Default::default()
        };
        let e = process_env(&bad, &img()).expect_err("not UTF-8");
        assert!(e.0.contains("\"X\" is not UTF-8"), "{}", e.0);
    }

    #[test]
    fn capability_add_drop_all_privileged() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let caps = capabilities(&s(&["NET_ADMIN"]), &s(&["CAP_CHOWN"]), false).expect("caps");
        assert!(
            caps.contains(&"CAP_NET_ADMIN".to_string()) && !caps.contains(&"CAP_CHOWN".to_string())
        );
        assert_eq!(
            capabilities(&s(&["NET_BIND_SERVICE"]), &s(&["ALL"]), false).expect("drop all"),
            vec!["CAP_NET_BIND_SERVICE"]
        );
        assert_eq!(
            capabilities(&s(&["ALL"]), &[], false).expect("add all"),
            current_caps()
        );
        assert_eq!(
            capabilities(&[], &[], true).expect("privileged"),
            current_caps()
        );
        assert!(capabilities(&s(&["NOPE"]), &[], false).is_err());
    }

    #[test]
    fn spec_joins_the_pod_and_maps_resources() {
        let files = Path::new("/var/lib/husk/sandboxes/p");
        let pod = PodContext {
            netns: Some(Path::new("/run/husk/ns/p/net")),
            ipcns: Some(Path::new("/run/husk/ns/p/ipc")),
            utsns: Some(Path::new("/run/husk/ns/p/uts")),
            pause_pid: 4242,
            files_dir: files,
            shm: Some(Path::new("/var/lib/husk/sandboxes/p/shm")),
            cgroups_path: "/kubepods/podx/c1",
        };
        let c = ContainerConfig {
            command: vec!["/bin/true".into()],
            mounts: vec![Mount {
                container_path: "/host".into(),
                host_path: "/srv".into(),
                readonly: true,
                propagation: MountPropagation::PropagationHostToContainer as i32,
                ..Default::default()
            }],
            linux: Some(LinuxContainerConfig {
                resources: Some(LinuxContainerResources {
                    cpu_period: 100_000,
                    cpu_quota: 50_000,
                    cpu_shares: 512,
                    memory_limit_in_bytes: 64 << 20,
                    ..Default::default()
                }),
                security_context: Some(LinuxContainerSecurityContext {
                    namespace_options: Some(NamespaceOption {
                        pid: NamespaceMode::Pod as i32,
                        ..Default::default()
                    }),
                    readonly_rootfs: true,
                    no_new_privs: true,
                    ..Default::default()
                }),
            }),
            ..Default::default()
        };
        let who = Identity {
            uid: 1000,
            gid: 1000,
            additional_gids: vec![1000, 10],
            home: "/home/u".into(),
        };
        let v = build("c1", &c, &img(), &who, &pod).expect("spec");
        let ns = v["linux"]["namespaces"].as_array().expect("ns");
        assert!(ns
            .iter()
            .any(|n| n["type"] == "pid" && n["path"] == "/proc/4242/ns/pid"));
        assert!(ns
            .iter()
            .any(|n| n["type"] == "network" && n["path"] == "/run/husk/ns/p/net"));
        assert_eq!(v["linux"]["cgroupsPath"], "/kubepods/podx/c1");
        assert_eq!(v["linux"]["resources"]["cpu"]["quota"], 50_000);
        assert_eq!(v["linux"]["resources"]["memory"]["limit"], 64 << 20);
        assert_eq!(v["process"]["user"]["additionalGids"], json!([1000, 10]));
        assert_eq!(v["process"]["capabilities"]["inheritable"], json!([]));
        assert_eq!(v["process"]["capabilities"]["ambient"], json!([]));
        assert!(v["process"]["env"]
            .as_array()
            .expect("env")
            .contains(&json!("HOME=/home/u")));
        assert_eq!(v["process"]["cwd"], "/work");
        assert_eq!(v["root"]["readonly"], true);
        let mounts = v["mounts"].as_array().expect("mounts");
        let host = mounts
            .iter()
            .find(|m| m["destination"] == "/host")
            .expect("user mount");
        assert_eq!(host["options"], json!(["rbind", "rslave", "ro"]));
        assert!(mounts.iter().any(|m| m["destination"] == "/etc/resolv.conf"
            && m["source"] == files.join("resolv.conf").display().to_string()));
        assert!(mounts.iter().any(|m| m["destination"] == "/data"));
        assert!(!v["linux"]["maskedPaths"]
            .as_array()
            .expect("masked")
            .is_empty());
    }
}
