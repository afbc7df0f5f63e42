//! The mounts and devices of an application container's OCI spec.
//!
//! - Defaults as containerd gives them: /proc, /dev (tmpfs), /dev/pts,
//!   /dev/mqueue, /sys (read-only unless privileged) and the container's
//!   own cgroups at /sys/fs/cgroup (read-only unless privileged).
//! - The pod's resolv.conf, hostname, hosts and /dev/shm, image volumes,
//!   then the config's mounts, which win at the same destination.
//! - Devices from the config, with the cgroup rules that allow them;
//!   privileged containers get the host's devices.

use super::spec::{ImageDefaults, PodContext};
use super::SpecError;
use crate::api::cri::{ContainerConfig, MountPropagation};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

fn propagation(p: i32) -> &'static str {
    match MountPropagation::try_from(p) {
        Ok(MountPropagation::PropagationHostToContainer) => "rslave",
        Ok(MountPropagation::PropagationBidirectional) => "rshared",
        _ => "rprivate",
    }
}

/// The mounts: defaults, the pod's files and /dev/shm, image volumes, then
/// the config's mounts (which win at the same destination).
pub fn mounts(
    c: &ContainerConfig,
    pod: &PodContext<'_>,
    img: &ImageDefaults,
    privileged: bool,
) -> Vec<Value> {
    let (sys_opts, cgroup_opts) = if privileged {
        (
            json!(["nosuid", "noexec", "nodev"]),
            json!(["nosuid", "noexec", "nodev", "relatime"]),
        )
    } else {
        (
            json!(["nosuid", "noexec", "nodev", "ro"]),
            json!(["nosuid", "noexec", "nodev", "relatime", "ro"]),
        )
    };
    let mut m = vec![
        json!({"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid", "noexec", "nodev"]}),
        json!({"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]}),
        json!({"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]}),
        json!({"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": ["nosuid", "noexec", "nodev"]}),
        json!({"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": sys_opts}),
        // The container's own cgroups, read-only unless privileged.
        json!({"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup", "options": cgroup_opts}),
    ];
    let user_dests: Vec<&str> = c.mounts.iter().map(|x| x.container_path.as_str()).collect();
    for f in ["resolv.conf", "hostname", "hosts"] {
        let dest = format!("/etc/{f}");
        if !user_dests.contains(&dest.as_str()) {
            m.push(json!({"destination": dest, "type": "bind", "source": pod.files_dir.join(f), "options": ["rbind", "rprivate", "rw"]}));
        }
    }
    if !user_dests.contains(&"/dev/shm") {
        let src = pod
            .shm
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("/dev/shm"));
        m.push(json!({"destination": "/dev/shm", "type": "bind", "source": src, "options": ["rbind", "rprivate", "rw"]}));
    }
    for (dest, src) in &img.volumes {
        if !user_dests.contains(&dest.as_str()) {
            m.push(json!({"destination": dest, "type": "bind", "source": src, "options": ["rbind", "rprivate", "rw"]}));
        }
    }
    for x in &c.mounts {
        let mut opts = vec!["rbind".to_string(), propagation(x.propagation).to_string()];
        opts.push(if x.readonly { "ro" } else { "rw" }.to_string());
        m.push(json!({"destination": x.container_path, "type": "bind", "source": x.host_path, "options": opts}));
    }
    m
}

/// The config's devices: the device nodes to create in the container and
/// the cgroup rules that allow them, from the host nodes' type and numbers.
pub fn devices(c: &ContainerConfig) -> Result<(Vec<Value>, Vec<Value>), SpecError> {
    let (mut nodes, mut rules) = (Vec::new(), Vec::new());
    for d in &c.devices {
        let st = rustix::fs::stat(d.host_path.as_str())
            .map_err(|e| SpecError(format!("device {:?}: {e}", d.host_path)))?;
        let kind = match rustix::fs::FileType::from_raw_mode(st.st_mode) {
            rustix::fs::FileType::CharacterDevice => "c",
            rustix::fs::FileType::BlockDevice => "b",
            _ => return Err(SpecError(format!("{:?} is not a device", d.host_path))),
        };
        let (major, minor) = (rustix::fs::major(st.st_rdev), rustix::fs::minor(st.st_rdev));
        let dest = if d.container_path.is_empty() {
            &d.host_path
        } else {
            &d.container_path
        };
        let access = if d.permissions.is_empty() {
            "rwm"
        } else {
            d.permissions.as_str()
        };
        if !access.chars().all(|ch| matches!(ch, 'r' | 'w' | 'm')) {
            return Err(SpecError(format!(
                "device {dest:?}: permissions {access:?} must be of r, w, m"
            )));
        }
        nodes.push(json!({"path": dest, "type": kind, "major": major, "minor": minor, "fileMode": st.st_mode & 0o777, "uid": 0, "gid": 0}));
        rules.push(
            json!({"allow": true, "type": kind, "major": major, "minor": minor, "access": access}),
        );
    }
    Ok((nodes, rules))
}
