//! The mounts and devices of an application container's OCI spec.
//!
//! - Defaults as containerd gives them: /proc, /dev (tmpfs), /dev/pts,
//!   /dev/mqueue, /sys (read-only unless privileged) and the container's
//!   own cgroups at /sys/fs/cgroup (read-only unless privileged).
//! - The pod's resolv.conf, hostname, hosts and /dev/shm, image volumes,
//!   then the config's mounts, which win at the same destination.
//! - Devices from the config, with the cgroup rules that allow them;
//!   privileged containers get the host's devices.

use super::context::{ImageDefaults, PodContext};
use super::SpecError;
use crate::api::cri::{ContainerConfig, MountPropagation};
use crate::cgroup::Layout;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn propagation(p: i32) -> &'static str {
    match MountPropagation::try_from(p) {
        Ok(MountPropagation::PropagationHostToContainer) => "rslave",
        Ok(MountPropagation::PropagationBidirectional) => "rshared",
        _ => "rprivate",
    }
}

/// v1 controllers libcontainer makes a cgroup for (so a bind source
/// exists by the time the container's root is set up).
const V1_CONTROLLERS: [&str; 12] = [
    "cpu",
    "cpuacct",
    "cpuset",
    "memory",
    "pids",
    "blkio",
    "devices",
    "freezer",
    "hugetlb",
    "net_cls",
    "net_prio",
    "perf_event",
];

/// The container's own cgroups at /sys/fs/cgroup, read-only unless
/// privileged.
///
/// - cgroup v2: a cgroup mount of the container's cgroup.
/// - cgroup v1: a tmpfs holding, per controller hierarchy, a bind mount of
///   the container's own cgroup dir, under the hierarchy's name and under
///   each co-mounted controller's name (`cpu,cpuacct`, `cpu`, `cpuacct`),
///   as runc lays it out. libcontainer 0.7's own v1 cgroup mount looks
///   its process up in the host's /proc by the PID it has inside the pod;
///   in a pod's shared PID namespace that is another process, or none once
///   the pod's PIDs pass the host's, and then every new container in the pod
///   fails to start.
pub fn cgroup_mounts(layout: &Layout, cgroups_path: &str, privileged: bool) -> Vec<Value> {
    let ro = |mut o: Vec<&str>| {
        if !privileged {
            o.push("ro");
        }
        json!(o)
    };
    let v1 = match layout {
        Layout::V2(_) => {
            return vec![
                json!({"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup", "options": ro(vec!["nosuid", "noexec", "nodev", "relatime"])}),
            ]
        }
        Layout::V1(m) => m,
    };
    let mut hierarchies: BTreeMap<&Path, Vec<&str>> = BTreeMap::new();
    for (ctrl, point) in v1 {
        if V1_CONTROLLERS.contains(&ctrl.as_str()) {
            hierarchies
                .entry(point.as_path())
                .or_default()
                .push(ctrl.as_str());
        }
    }
    let mut m = vec![
        json!({"destination": "/sys/fs/cgroup", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "noexec", "nodev", "mode=755", "size=64k"]}),
    ];
    let path = crate::cgroup::paths::fs_path(cgroups_path);
    let rel = path.trim_start_matches('/');
    for (point, mut ctrls) in hierarchies {
        let Some(name) = point.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        ctrls.sort_unstable();
        let mut dests = vec![name];
        dests.extend(ctrls.into_iter().filter(|c| *c != name));
        for d in dests {
            m.push(json!({
                "destination": format!("/sys/fs/cgroup/{d}"),
                "type": "bind",
                "source": point.join(rel),
                "options": ro(vec!["rbind", "rprivate", "nosuid", "noexec", "nodev"]),
            }));
        }
    }
    m
}

/// The propagation of the container's root: shared when a mount is
/// bidirectional, slave when one takes the host's mounts, otherwise left
/// to the runtime (slave), as containerd sets it. libcontainer always
/// applies it recursively and knows only the names without the `r`.
pub fn rootfs_propagation(c: &ContainerConfig) -> Option<&'static str> {
    let has = |want: MountPropagation| c.mounts.iter().any(|m| m.propagation == want as i32);
    if has(MountPropagation::PropagationBidirectional) {
        Some("shared")
    } else if has(MountPropagation::PropagationHostToContainer) {
        Some("slave")
    } else {
        None
    }
}

/// Whether the kernel can make a mount read-only recursively
/// (mount_setattr(2), Linux 5.12).
pub fn recursive_read_only_supported() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        // SAFETY: mount_setattr with an invalid fd and a null attr only
        // probes for the syscall: ENOSYS when missing, another errno when
        // present.
        let r = unsafe {
            libc::syscall(
                libc::SYS_mount_setattr,
                -1,
                std::ptr::null::<libc::c_char>(),
                0,
                std::ptr::null::<libc::c_void>(),
                0,
            )
        };
        !(r == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS))
    })
}

/// The files under /proc that a bind mount may cover, as runc allows
/// them (what lxcfs provides, and the pid counter).
const PROC_ALLOWED: [&str; 10] = [
    "/proc/cpuinfo",
    "/proc/diskstats",
    "/proc/meminfo",
    "/proc/stat",
    "/proc/swaps",
    "/proc/uptime",
    "/proc/loadavg",
    "/proc/slabinfo",
    "/proc/net/dev",
    "/proc/sys/kernel/ns_last_pid",
];

/// A bind mount on or under /proc is refused (a file of the node's
/// choosing over `/proc/self/attr/…` or `/proc/sys/…` defeats AppArmor
/// and sysctl confinement), except over [`PROC_ALLOWED`]. `dest` is the
/// mount's destination as the container will see it: lexically cleaned
/// here, and called again by the caller with the destination resolved
/// through the image's symlinks.
pub fn check_proc_destination(asked: &str, dest: &str) -> Result<(), SpecError> {
    let clean = super::kernel_mounts::clean(dest);
    if super::kernel_mounts::on_or_under(&clean, "/proc") && !PROC_ALLOWED.contains(&clean.as_str())
    {
        return Err(SpecError(format!(
            "mount {asked}: a bind mount on {clean} is refused (only procfs may be mounted \
             on or under /proc, besides {})",
            PROC_ALLOWED.join(", ")
        )));
    }
    Ok(())
}

/// Makes a missing working directory inside the rootfs, owned by the
/// container's user (as runc does), so that a `workingDir` the image
/// lacks does not fail the start. A directory that resolves (through the
/// image's symlinks) on or under /proc is not made: procfs is mounted
/// there. One in a process's own directory (`/proc/self/fd/N`,
/// `/proc/<pid>/cwd`) is InvalidArgument (CVE-2024-21626); the init's
/// check before execve (`shim/payload.rs`) stands behind it. `to_host` maps the
/// user's ids to the node's in a pod with its own user namespace.
pub fn make_working_dir(
    rootfs: &std::path::Path,
    cwd: &str,
    who: &super::user::Identity,
    to_host: Option<impl Fn(u32, u32) -> Option<(u32, u32)>>,
) -> Result<(), crate::sandbox::SandboxError> {
    let rel = std::path::Path::new(cwd);
    if !rel.is_absolute() || cwd == "/" {
        return Ok(());
    }
    let Some(at) = crate::image::confined::resolve_in_root(rootfs, rel) else {
        return Ok(());
    };
    if at == std::path::Path::new("/proc") || at.starts_with("/proc/") {
        // A process's own descriptors and directories: the working
        // directory would be whatever the init holds open at its chdir.
        let per_process = at
            .components()
            .nth(2)
            .and_then(|c| c.as_os_str().to_str())
            .is_some_and(|c| {
                c == "self" || c == "thread-self" || c.bytes().all(|b| b.is_ascii_digit())
            });
        if per_process {
            return Err(crate::sandbox::SandboxError::Invalid(format!(
                "working_dir {cwd:?} is a process's directory under /proc ({}): refused",
                at.display()
            )));
        }
        return Ok(());
    }
    if rootfs.join(at.strip_prefix("/").unwrap_or(&at)).is_dir() {
        return Ok(());
    }
    crate::image::confined::mkdir_all_in_root(rootfs, rel)?;
    let (uid, gid) = match to_host {
        None => (who.uid, who.gid),
        Some(f) => match f(who.uid, who.gid) {
            Some(ids) => ids,
            None => return Ok(()),
        },
    };
    let made = rootfs.join(at.strip_prefix("/").unwrap_or(&at));
    rustix::fs::chownat(
        rustix::fs::CWD,
        &made,
        Some(rustix::process::Uid::from_raw(uid)),
        Some(rustix::process::Gid::from_raw(gid)),
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    )
    .map_err(|e| {
        crate::sandbox::SandboxError::io(format!("give the working directory {cwd} to its user"))(
            e.into(),
        )
    })
}

/// A recursive read-only mount must be read-only and private (the CRI,
/// as containerd checks it).
pub fn check_recursive_read_only(c: &ContainerConfig) -> Result<(), SpecError> {
    for m in c.mounts.iter().filter(|m| m.recursive_read_only) {
        if !m.readonly {
            return Err(SpecError(format!(
                "mount {}: recursive_read_only needs readonly",
                m.container_path
            )));
        }
        if m.propagation != MountPropagation::PropagationPrivate as i32 {
            return Err(SpecError(format!(
                "mount {}: recursive_read_only needs private propagation, not {}",
                m.container_path,
                propagation(m.propagation)
            )));
        }
        if !recursive_read_only_supported() {
            return Err(SpecError(format!(
                "mount {}: recursive_read_only needs mount_setattr(2), which this kernel lacks",
                m.container_path
            )));
        }
    }
    Ok(())
}

/// Checks that each mount asking for propagation has a source that can
/// give it: a shared mount for bidirectional, shared or slave for
/// host-to-container (containerd refuses the same). `mountinfo` is the
/// text of /proc/self/mountinfo.
pub fn check_propagation(c: &ContainerConfig, mountinfo: &str) -> Result<(), SpecError> {
    for m in &c.mounts {
        let want = MountPropagation::try_from(m.propagation).unwrap_or_default();
        if want == MountPropagation::PropagationPrivate {
            continue;
        }
        let Some((point, optional)) = mount_of(Path::new(&m.host_path), mountinfo) else {
            continue;
        };
        let shared = optional.split(' ').any(|o| o.starts_with("shared:"));
        let slave = optional.split(' ').any(|o| o.starts_with("master:"));
        let ok = match want {
            MountPropagation::PropagationBidirectional => shared,
            _ => shared || slave,
        };
        if !ok {
            return Err(SpecError(format!(
                "mount {}: {} propagation needs a {} mount, but {} is private (mount --make-rshared {} first)",
                m.host_path,
                propagation(m.propagation),
                if want == MountPropagation::PropagationBidirectional { "shared" } else { "shared or slave" },
                point,
                point,
            )));
        }
    }
    Ok(())
}

/// The mount point holding `path` (the longest matching mount point; the
/// last one mounted wins a tie) and its optional fields.
pub(super) fn mount_of<'a>(path: &Path, mountinfo: &'a str) -> Option<(&'a str, &'a str)> {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mut best: Option<(&str, &str)> = None;
    for line in mountinfo.lines() {
        let Some((left, _)) = line.split_once(" - ") else {
            continue;
        };
        let fields: Vec<&str> = left.splitn(7, ' ').collect();
        let (Some(point), optional) = (fields.get(4), fields.get(6).copied().unwrap_or("")) else {
            continue;
        };
        if path.starts_with(point) && best.is_none_or(|(b, _)| point.len() >= b.len()) {
            best = Some((point, optional));
        }
    }
    best
}

/// The mount points strictly below `path` in `mountinfo`, with their
/// optional fields, but those under `skip`, sorted (two namespaces list
/// the same mounts in different orders).
pub(super) fn mounts_below<'a>(
    path: &Path,
    mountinfo: &'a str,
    skip: &[std::path::PathBuf],
) -> Vec<(&'a str, &'a str)> {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mut below = mountinfo
        .lines()
        .filter_map(|line| {
            let (left, _) = line.split_once(" - ")?;
            let fields: Vec<&str> = left.splitn(7, ' ').collect();
            let point = *fields.get(4)?;
            let p = Path::new(point);
            (p != path && p.starts_with(&path) && !skip.iter().any(|s| p.starts_with(s)))
                .then(|| (point, fields.get(6).copied().unwrap_or("")))
        })
        .collect::<Vec<_>>();
    below.sort_unstable();
    below
}

/// The mounts: defaults, the pod's files and /dev/shm, image volumes, then
/// the config's mounts (which win at the same destination), in the order
/// of `kernel_mounts::order`.
pub fn mounts(
    c: &ContainerConfig,
    pod: &PodContext<'_>,
    img: &ImageDefaults,
    privileged: bool,
    cgroups_path: &str,
) -> Vec<Value> {
    let sys_opts = if privileged {
        json!(["nosuid", "noexec", "nodev"])
    } else {
        json!(["nosuid", "noexec", "nodev", "ro"])
    };
    let mut kernel = vec![
        json!({"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid", "noexec", "nodev"]}),
        json!({"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]}),
        json!({"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]}),
        json!({"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": ["nosuid", "noexec", "nodev"]}),
        json!({"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": sys_opts}),
    ];
    kernel.extend(cgroup_mounts(
        crate::cgroup::Layout::host(),
        cgroups_path,
        privileged,
    ));
    let mut m = Vec::new();
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
        if x.recursive_read_only {
            opts.push("rro".to_string());
        }
        m.push(json!({"destination": x.container_path, "type": "bind", "source": x.host_path, "options": opts}));
    }
    super::kernel_mounts::order(kernel, m)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::cri::Mount;

    const MOUNTINFO: &str = "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/vda rw
40 22 8:1 /tmp/a /tmp/a rw shared:7 - ext4 /dev/vda rw
41 22 8:1 /tmp/b /tmp/b rw master:7 - ext4 /dev/vda rw
42 22 8:1 /tmp/c /tmp/c rw - ext4 /dev/vda rw";

    fn with(path: &str, p: MountPropagation) -> ContainerConfig {
        ContainerConfig {
            mounts: vec![Mount {
                host_path: path.into(),
                container_path: "/m".into(),
                propagation: p as i32,
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn v1_cgroups_are_bound_per_hierarchy_and_v2_mounted() {
        let l = Layout::from_mountinfo(
            "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,name=systemd",
        );
        let m = cgroup_mounts(&l, "/kubepods/pod1/c1", false);
        assert_eq!(m[0]["type"], "tmpfs");
        let dests: Vec<&str> = m[1..]
            .iter()
            .map(|x| x["destination"].as_str().expect("dest"))
            .collect();
        assert_eq!(
            dests,
            [
                "/sys/fs/cgroup/cpu,cpuacct",
                "/sys/fs/cgroup/cpu",
                "/sys/fs/cgroup/cpuacct",
                "/sys/fs/cgroup/memory"
            ]
        );
        assert_eq!(m[4]["source"], "/sys/fs/cgroup/memory/kubepods/pod1/c1");
        assert!(m[4]["options"]
            .as_array()
            .expect("opts")
            .contains(&json!("ro")));
        let priv_ = cgroup_mounts(&l, "/x", true);
        assert!(!priv_[1]["options"]
            .as_array()
            .expect("opts")
            .contains(&json!("ro")));
        let v2 = cgroup_mounts(
            &Layout::from_mountinfo("30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw"),
            "/x",
            false,
        );
        assert_eq!((v2.len(), v2[0]["type"].as_str()), (1, Some("cgroup")));
    }

    #[test]
    fn propagation_needs_a_source_that_can_give_it() {
        use MountPropagation::*;
        assert!(check_propagation(&with("/tmp/a/x", PropagationBidirectional), MOUNTINFO).is_ok());
        assert!(
            check_propagation(&with("/tmp/b/x", PropagationHostToContainer), MOUNTINFO).is_ok()
        );
        let e = check_propagation(&with("/tmp/b/x", PropagationBidirectional), MOUNTINFO)
            .expect_err("slave is not shared");
        assert!(e.0.contains("/tmp/b"), "{}", e.0);
        assert!(check_propagation(&with("/tmp/c", PropagationHostToContainer), MOUNTINFO).is_err());
        assert!(check_propagation(&with("/tmp/c", PropagationPrivate), MOUNTINFO).is_ok());
        assert_eq!(
            rootfs_propagation(&with("/x", PropagationBidirectional)),
            Some("shared")
        );
        assert_eq!(
            rootfs_propagation(&with("/x", PropagationHostToContainer)),
            Some("slave")
        );
        assert_eq!(rootfs_propagation(&with("/x", PropagationPrivate)), None);
    }
}
