//! The OCI runtime spec (config.json) of a pod's pause container.
//!
//! Only a pod whose containers share one PID namespace has a pause
//! (`pause.rs`). The pause process joins the pod's pinned network, IPC and
//! UTS namespaces (or the host's, for NODE) and gets its own mount and PID
//! namespaces: the one its pod's containers join. It runs under the
//! pod cgroup with the default capability set, masked and read-only paths
//! as containerd sets them, and an `oomScoreAdj` clamped to what this
//! process may set.

use serde_json::{json, Value};
use std::path::Path;

/// The default capabilities of a container (containerd's and Docker's).
pub const DEFAULT_CAPS: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
];

pub const MASKED_PATHS: &[&str] = &[
    "/proc/acpi",
    "/proc/asound",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

pub const READONLY_PATHS: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// The lowest `oom_score_adj` this process may give a child: without
/// CAP_SYS_RESOURCE it cannot go below its own (containerd's
/// restrict_oom_score_adj).
pub fn clamp_oom_score_adj(wanted: i32) -> i32 {
    let own: i32 = std::fs::read_to_string("/proc/self/oom_score_adj")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    let has_sys_resource = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("CapEff:"))
                .and_then(|l| u64::from_str_radix(l.split_whitespace().nth(1)?, 16).ok())
        })
        .map(|caps| caps & (1 << 24) != 0)
        .unwrap_or(false);
    if has_sys_resource {
        wanted.clamp(-1000, 1000)
    } else {
        wanted.clamp(own, 1000)
    }
}

/// What the pause spec needs.
pub struct PauseSpec<'a> {
    pub args: Vec<String>,
    pub env: Vec<String>,
    pub uid: u32,
    pub gid: u32,
    pub readonly_rootfs: bool,
    pub cgroups_path: String,
    /// Pinned namespace paths; None = the host's.
    pub netns: Option<&'a Path>,
    pub ipcns: Option<&'a Path>,
    pub utsns: Option<&'a Path>,
    /// The pod's user namespace; None: the node's users.
    pub userns: Option<&'a super::userns::PodUserns>,
    /// A private cgroup namespace (cgroup v2 hosts).
    pub cgroup_ns: bool,
    pub oom_score_adj: i32,
    pub shm: Option<&'a Path>,
    /// `linux.seccomp`, None for no filter.
    pub seccomp: Option<Value>,
}

fn mounts(shm: Option<&Path>) -> Vec<Value> {
    let mut m = vec![
        json!({"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid", "noexec", "nodev"]}),
        json!({"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]}),
        json!({"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]}),
        json!({"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": ["nosuid", "noexec", "nodev"]}),
        json!({"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]}),
    ];
    match shm {
        Some(p) => m.push(json!({"destination": "/dev/shm", "type": "bind", "source": p, "options": ["rbind", "ro", "nosuid", "nodev", "noexec"]})),
        None => m.push(json!({"destination": "/dev/shm", "type": "bind", "source": "/dev/shm", "options": ["rbind", "ro"]})),
    }
    m
}

/// The config.json of the pause container.
pub fn pause(p: &PauseSpec<'_>) -> Value {
    let mut namespaces = vec![json!({"type": "mount"}), json!({"type": "pid"})];
    for (kind, path) in [("network", p.netns), ("ipc", p.ipcns), ("uts", p.utsns)] {
        if let Some(path) = path {
            namespaces.push(json!({"type": kind, "path": path}));
        }
    }
    if p.cgroup_ns {
        namespaces.push(json!({"type": "cgroup"}));
    }
    let mut spec = base(p, namespaces);
    if let Some(u) = p.userns {
        user_namespace(&mut spec, u);
    }
    spec
}

/// Joins the pod's user namespace: its pin first among the namespaces
/// (libcontainer enters it before the others, which it owns), and its
/// mappings as `uidMappings`/`gidMappings` for what reads them.
pub fn user_namespace(spec: &mut Value, u: &super::userns::PodUserns) {
    let (uids, gids) = u.spec_mappings();
    let linux = &mut spec["linux"];
    if let Some(ns) = linux["namespaces"].as_array_mut() {
        ns.insert(0, json!({"type": "user", "path": u.pin}));
    }
    linux["uidMappings"] = uids;
    linux["gidMappings"] = gids;
}

fn base(p: &PauseSpec<'_>, namespaces: Vec<Value>) -> Value {
    let caps: Vec<&str> = DEFAULT_CAPS.to_vec();
    json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": false,
            // Its own gid as its only group: with no list, libcontainer
            // would skip setgroups and keep the server's groups.
            "user": {"uid": p.uid, "gid": p.gid, "additionalGids": [p.gid]},
            "args": p.args,
            "env": p.env,
            "cwd": "/",
            // Inheritable and ambient pinned empty: left out, libcontainer
            // would keep the server's (the CRI never asks for either).
            "capabilities": {"bounding": caps, "effective": caps, "permitted": caps,
                             "inheritable": [], "ambient": []},
            "noNewPrivileges": true,
            "oomScoreAdj": p.oom_score_adj,
        },
        "root": {"path": "rootfs", "readonly": p.readonly_rootfs},
        "mounts": mounts(p.shm),
        "linux": {
            "cgroupsPath": p.cgroups_path,
            "namespaces": namespaces,
            "maskedPaths": MASKED_PATHS,
            "readonlyPaths": READONLY_PATHS,
            "resources": {"devices": [{"allow": false, "access": "rwm"}]},
            "seccomp": p.seccomp,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pause_joins_pinned_namespaces() {
        let net = Path::new("/run/husk/ns/x/net");
        let v = pause(&PauseSpec {
            args: vec!["/pause".into()],
            env: vec!["PATH=/bin".into()],
            uid: 65535,
            gid: 65535,
            readonly_rootfs: true,
            cgroups_path: "/kubepods/podx/x".into(),
            netns: Some(net),
            ipcns: None,
            utsns: None,
            userns: None,
            cgroup_ns: true,
            oom_score_adj: -998,
            shm: None,
            seccomp: None,
        });
        let ns = v["linux"]["namespaces"].as_array().expect("namespaces");
        assert!(ns
            .iter()
            .any(|n| n["type"] == "network" && n["path"] == "/run/husk/ns/x/net"));
        assert!(ns
            .iter()
            .any(|n| n["type"] == "pid" && n.get("path").is_none()));
        assert!(!ns.iter().any(|n| n["type"] == "uts"));
        assert!(ns
            .iter()
            .any(|n| n["type"] == "cgroup" && n.get("path").is_none()));
        assert!(v["linux"].get("sysctl").is_none(), "the server sets them");
        assert_eq!(v["root"]["readonly"], true);
    }

    #[test]
    fn oom_clamp_never_goes_below_own_without_the_capability() {
        let own: i32 = std::fs::read_to_string("/proc/self/oom_score_adj")
            .expect("read")
            .trim()
            .parse()
            .expect("int");
        let got = clamp_oom_score_adj(-998);
        assert!((-1000..=1000).contains(&got));
        assert!(got == -998 || got == own, "{got}");
        assert_eq!(clamp_oom_score_adj(500), 500.max(own));
    }
}
