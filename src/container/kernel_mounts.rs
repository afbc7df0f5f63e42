//! Where a container's volumes may land beside the kernel's file systems
//! that the runtime mounts for it (`/proc`, `/sys`, `/dev` and its
//! device nodes), and in which order the spec lists them.
//!
//! - **No volume at `/dev`** or on a node the runtime makes there (`null`,
//!   `pts`, `console`, `ptmx`, …), named so or through the image's
//!   symlinks: the runtime would write its device nodes into the node's
//!   directory behind it, and the container's `/dev/null`, which masks the
//!   masked paths, would be whatever that directory holds
//!   (CVE-2025-31133). Such a mount is InvalidArgument naming it; devices
//!   are given through `devices` or CDI. The one exception is the whole
//!   `/dev` of a privileged container under an OCI runtime handler (no
//!   masked paths, and runc makes no nodes in a bound `/dev`): the shape
//!   of the storage and device plugins that take the node's `/dev`.
//! - **Volumes before the kernel's file systems.** A runtime resolves a
//!   destination again when it mounts it, through the volumes mounted
//!   before it: a neighbour sharing an emptyDir can turn a nested
//!   destination into a link to `/dev`, `/dev/pts` or `/proc` between
//!   husk's check and the runtime's mount (CVE-2025-31133, -52565,
//!   -52881). So every volume that is not under `/proc`, `/sys` or `/dev`
//!   is listed first; then procfs, sysfs, the cgroups and the `/dev`
//!   tmpfs, which cover whatever a redirected volume reached there; then
//!   the volumes under those (the pod's `/dev/shm`, the kubelet's
//!   termination log, lxcfs files) and mqueue, parents before children,
//!   whose parents no neighbour can reach; and devpts last, so the
//!   console's pty comes from a devpts of the container's own. Whatever was redirected stays under them, unseen
//!   and unwritten. This holds for every handler: runc mounts in the
//!   spec's order too.

use super::SpecError;
use serde_json::Value;
use std::path::Path;

/// What a runtime makes in a container's `/dev` (libcontainer's and runc's
/// default devices and links, the console and the devpts).
pub const RUNTIME_DEV_NODES: [&str; 14] = [
    "null", "zero", "full", "random", "urandom", "tty", "console", "ptmx", "pts", "fd", "stdin",
    "stdout", "stderr", "core",
];

/// `dest` lexically cleaned, absolute (`//dev/.` is `/dev`).
pub(super) fn clean(dest: &str) -> String {
    format!(
        "/{}",
        crate::image::confined::join(&crate::image::confined::clean(Path::new(dest))).display()
    )
}

/// Who may have a volume at `/dev` itself.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum DevVolume {
    /// Nobody (husk's own path: libcontainer makes its device nodes in
    /// whatever `/dev` is; and any container with masked paths).
    Refused,
    /// A privileged container under an OCI runtime handler: it has no
    /// masked paths, and the runtime makes no device nodes in a
    /// bind-mounted `/dev` (runc's rule), so the node's `/dev` can be
    /// given to a device or storage plugin as the peers give it.
    Privileged,
}

/// Whether the cleaned path `path` is `dir` or below it.
pub(super) fn on_or_under(path: &str, dir: &str) -> bool {
    path == dir
        || path
            .strip_prefix(dir)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// Refuses a mount of `asked` that lands at `dest` (its destination as
/// asked, or resolved through the image's symlinks) on `/dev` (unless
/// `whole` allows it) or on a node the runtime makes there.
pub fn check_dev_destination(asked: &str, dest: &str, whole: DevVolume) -> Result<(), SpecError> {
    let clean = clean(dest);
    let node = clean
        .strip_prefix("/dev/")
        .and_then(|rest| rest.split('/').next())
        .filter(|first| RUNTIME_DEV_NODES.contains(first));
    if clean == "/dev" && whole == DevVolume::Privileged {
        return Ok(());
    }
    if clean == "/dev" || node.is_some() {
        return Err(SpecError(format!(
            "mount {asked}: a volume at {clean} is refused: /dev is the container's own tmpfs, \
             whose device nodes the runtime makes and whose /dev/null masks the masked paths \
             (a volume there would have them written into the node's directory and chosen by \
             whoever else can write it); give devices through the container's devices or CDI \
             (only a privileged container under an OCI runtime handler may have a volume at \
             /dev itself)"
        )));
    }
    Ok(())
}

/// Whether `dest` is on or under one of the kernel's file systems that the
/// runtime mounts.
fn under_kernel_fs(dest: &str) -> bool {
    let c = clean(dest);
    ["/proc", "/sys", "/dev"].iter().any(|k| on_or_under(&c, k))
}

/// Orders a container's mounts: `kernel` (the runtime's file systems, in
/// their own order, devpts among them) and `binds` (the pod's files and
/// `/dev/shm`, image volumes and the config's mounts, in theirs) as the
/// module's header says.
pub fn order(kernel: Vec<Value>, binds: Vec<Value>) -> Vec<Value> {
    let dest = |m: &Value| m["destination"].as_str().unwrap_or("").to_string();
    // A whole /dev of the container's own (see `DevVolume::Privileged`)
    // replaces the runtime's /dev, mqueue and devpts, as containerd drops
    // every default mount under a /dev the container brings; the pod's
    // /dev/shm is still mounted over it.
    let whole_dev = binds.iter().any(|m| clean(&dest(m)) == "/dev");
    let kernel = kernel
        .into_iter()
        .filter(|m| !(whole_dev && on_or_under(&clean(&dest(m)), "/dev")));
    let (devpts, kernel): (Vec<Value>, Vec<Value>) = kernel.partition(|m| m["type"] == "devpts");
    // The /dev tmpfs and whatever is not under it first; mqueue goes with
    // the volumes under /dev, after a whole /dev a privileged container
    // may bind.
    let (first, under_dev): (Vec<Value>, Vec<Value>) = kernel
        .into_iter()
        .partition(|m| !dest(m).starts_with("/dev/"));
    let (inside, outside): (Vec<Value>, Vec<Value>) =
        binds.into_iter().partition(|m| under_kernel_fs(&dest(m)));
    // Parents before children (a stable sort: the config's mount still
    // follows the default it replaces at the same destination).
    let mut inside: Vec<Value> = under_dev.into_iter().chain(inside).collect();
    inside.sort_by_key(|m| clean(&dest(m)).matches('/').count());
    outside
        .into_iter()
        .chain(first)
        .chain(inside)
        .chain(devpts)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn dev_and_the_runtimes_nodes_are_refused_however_spelt() {
        for d in [
            "/dev",
            "/dev/",
            "//dev/.",
            "/dev/../dev",
            "/dev/null",
            "/dev/pts",
            "/dev/pts/0",
            "/dev/console",
            "/dev/ptmx",
            "/dev/fd",
        ] {
            let e = check_dev_destination("/asked", d, DevVolume::Refused)
                .expect_err(d)
                .0;
            assert!(e.contains("mount /asked") && e.contains("/dev"), "{d}: {e}");
        }
        for d in [
            "/dev/shm",
            "/dev/termination-log",
            "/dev/fuse",
            "/dev/nullx",
            "/devices",
            "/var/dev",
        ] {
            assert!(
                check_dev_destination(d, d, DevVolume::Refused).is_ok(),
                "{d}"
            );
        }
        // The whole of /dev for a privileged container under an OCI
        // handler; never the runtime's nodes.
        assert!(check_dev_destination("/dev", "//dev/.", DevVolume::Privileged).is_ok());
        for d in ["/dev/null", "/dev/pts", "/dev/console"] {
            assert!(
                check_dev_destination(d, d, DevVolume::Privileged).is_err(),
                "{d}"
            );
        }
    }

    #[test]
    fn volumes_come_before_the_kernels_file_systems_and_devpts_last() {
        let m = |d: &str, t: &str| json!({"destination": d, "type": t});
        let kernel = vec![
            m("/proc", "proc"),
            m("/dev", "tmpfs"),
            m("/dev/pts", "devpts"),
            m("/dev/mqueue", "mqueue"),
            m("/sys", "sysfs"),
        ];
        let binds = vec![
            m("/etc/hosts", "bind"),
            m("/dev/shm", "bind"),
            m("/vol", "bind"),
            m("/vol/d", "bind"),
            m("/proc/meminfo", "bind"),
            m("/dev/termination-log", "bind"),
            m("/sysroot", "bind"),
        ];
        let dests = |v: Vec<Value>| -> Vec<String> {
            v.iter()
                .map(|m| m["destination"].as_str().unwrap_or("").to_string())
                .collect()
        };
        // A whole /dev of the container's: no tmpfs, mqueue or devpts of the
        // runtime's under it; the pod's /dev/shm over it.
        let whole = order(
            kernel.clone(),
            vec![m("/dev/shm", "bind"), m("/dev/", "bind")],
        );
        assert_eq!(dests(whole), ["/proc", "/sys", "/dev/", "/dev/shm"]);
        assert_eq!(
            dests(order(kernel, binds)),
            [
                "/etc/hosts",
                "/vol",
                "/vol/d",
                "/sysroot",
                "/proc",
                "/dev",
                "/sys",
                "/dev/mqueue",
                "/dev/shm",
                "/proc/meminfo",
                "/dev/termination-log",
                "/dev/pts",
            ]
        );
    }
}
