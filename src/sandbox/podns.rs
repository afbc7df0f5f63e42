//! The pod's own mount namespace (`mount_namespace = "pod"`).
//!
//! Every mount of every pod in the node's namespace is copied into each
//! new container's namespace (`clone`), torn down again after its
//! `pivot_root`, and read line by line, four to six times a create on a
//! cgroup v1 node, by libcontainer looking for cgroup controllers the node
//! does not mount. At 1,000 pods (5,000 mounts) that is most of a
//! container's create: about 240 ms of 280 on this project's 2-core VM.
//!
//! So each pod's mounts live in its monitor's mount namespace instead.
//! The monitor (`husk shim`, started with [`crate::shim::client::MOUNT_NS_ENV`])
//! unshares one at its start, a copy of the node's that keeps its
//! propagation: where the node shares a mount (a kubelet's volumes) the
//! pod's copy is its peer, so what the node mounts there comes in, and a
//! container's Bidirectional volume reaches the node as it does from the
//! node's own namespace. The server's root and state are private mounts of
//! their own ([`keep_private`], at the server's start), so nothing mounted
//! under them propagates, either way: the pod's mounts stay the pod's, and
//! the server's (made on the node before each is handed over) are not
//! copied into every pod's namespace. The server makes each mount as it
//! always has, in the node's namespace, then hands it over ([`adopt`]): a
//! clone of it (`open_tree`) is attached at the same path in the pod's
//! namespace (`move_mount`) and the node's is unmounted. The pod's
//! processes find its pins, shm and rootfs at the paths they always had;
//! the server reaches them through `/proc/<monitor>/root` ([`seen`]), and
//! unmounts inside the pod's namespace ([`within`]). When the monitor
//! exits, its namespace goes, and with it every mount of the pod: none can
//! be left behind on the node.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

/// Makes each of `dirs` (the server's root and state) a mount whose
/// propagation is private: bound onto itself, with what is mounted under
/// it, unless the topmost mount there already is one. A pod's namespace
/// shares the node's propagation elsewhere; under these, what the server
/// mounts on the node (a pod's pins and rootfs before they are handed
/// over) is not copied into each pod's namespace, and what a pod's
/// namespace has there does not reach the node. The binds stay when the
/// server exits: the next server finds them. Returns the dirs as the
/// mount table names them.
pub fn keep_private(dirs: &[&Path]) -> io::Result<Vec<PathBuf>> {
    use rustix::mount::MountPropagationFlags;
    let mut out = Vec::new();
    for dir in dirs {
        let dir = std::fs::canonicalize(dir)?;
        if crate::sys::propagates(&dir) != Some(false) {
            refuse_node_mounts(&dir)?;
            rustix::mount::mount_bind_recursive(&dir, &dir).map_err(|e| {
                io::Error::other(format!("bind {} onto itself: {e}", dir.display()))
            })?;
        }
        rustix::mount::mount_change(
            &dir,
            MountPropagationFlags::PRIVATE | MountPropagationFlags::REC,
        )
        .map_err(|e| io::Error::other(format!("make {} private: {e}", dir.display())))?;
        out.push(dir);
    }
    Ok(out)
}

/// Whether this kernel and these dirs let pods keep their mounts in their
/// own namespaces, as `husk check` asks before a server starts: the
/// kernel has `open_tree` (Linux 5.2), and [`keep_private`] would not
/// refuse `dirs` (each private already, made yet or not, or with no mount
/// below it).
pub fn can_keep_pods_mounts(dirs: &[&Path]) -> io::Result<()> {
    rustix::mount::open_tree(
        rustix::fs::CWD,
        "/",
        rustix::mount::OpenTreeFlags::OPEN_TREE_CLOEXEC,
    )
    .map_err(|e| io::Error::other(format!("open_tree (Linux 5.2) fails: {e}")))?;
    for dir in dirs {
        let Ok(dir) = std::fs::canonicalize(dir) else {
            continue;
        };
        if crate::sys::propagates(&dir) != Some(false) {
            refuse_node_mounts(&dir)?;
        }
    }
    Ok(())
}

/// Before `dir` is first bound onto itself: a mount below it was made in
/// the node's namespace, by a pod of a server with `mount_namespace =
/// "node"` (running, or killed). The recursive bind would copy it, and
/// the pod's own mount would be hidden beneath the copy, out of reach of
/// its teardown; so the switch waits for those pods to go.
fn refuse_node_mounts(dir: &Path) -> io::Result<()> {
    let below: Vec<PathBuf> = crate::sys::mounts_under(dir)
        .into_iter()
        .filter(|m| m != dir)
        .collect();
    match below.first() {
        None => Ok(()),
        Some(first) => Err(io::Error::other(format!(
            "{} mounts under {} (the first {}) are in the node's mount namespace, held by pods \
             (or the one made ahead) of a server with mount_namespace = \"node\": serve with \
             that setting, stop and remove those pods, and stop the server, before serving with \
             mount_namespace = \"pod\"",
            below.len(),
            dir.display(),
            first.display()
        ))),
    }
}

/// At a clean stop: each of `dirs` (the server's root and state) that is
/// bound onto itself, by [`keep_private`] (this server's or a killed
/// one's), is unmounted, so that husk leaves no mount on the node once it
/// stops, and a package's purge can remove the dirs. The pods left running
/// keep their own copies, private; the next server binds again.
pub fn release_private(dirs: &[PathBuf]) {
    for dir in dirs {
        if !crate::sys::bound_onto_itself(dir) {
            continue;
        }
        if let Err(e) = rustix::mount::unmount(dir, rustix::mount::UnmountFlags::DETACH) {
            tracing::warn!(dir = %dir.display(), error = %e, "unmount the server's private bind");
        }
    }
}

/// `path` (as the pod's processes name it) as the server reaches it: inside
/// the mount namespace of the monitor `pid`.
pub fn seen(pid: u32, path: &Path) -> PathBuf {
    let mut p = PathBuf::from(format!("/proc/{pid}/root"));
    p.push(path.strip_prefix("/").unwrap_or(path));
    p
}

/// The path a [`seen`] path was made from (any other path as it is): where
/// its file is on the node (the same directory, not a mount there).
pub fn node_side(path: &Path) -> PathBuf {
    let mut c = path.components();
    let proc_root = matches!(
        (c.next(), c.next(), c.next(), c.next()),
        (
            Some(std::path::Component::RootDir),
            Some(a),
            Some(pid),
            Some(b),
        ) if a.as_os_str() == "proc"
            && b.as_os_str() == "root"
            && pid.as_os_str().to_str().is_some_and(|s| s.parse::<u32>().is_ok())
    );
    if proc_root {
        Path::new("/").join(c.as_path())
    } else {
        path.to_path_buf()
    }
}

/// Runs `f` on a thread of its own inside the mount namespace of the
/// monitor `pid` (it first stops sharing its root and working directory
/// with the server's threads, as `setns` into a mount namespace needs).
pub fn within<T: Send>(pid: u32, f: impl FnOnce() -> io::Result<T> + Send) -> io::Result<T> {
    let ns = File::open(format!("/proc/{pid}/ns/mnt"))?;
    std::thread::scope(|s| {
        s.spawn(move || {
            // SAFETY: CLONE_FS unshares this thread's root, working
            // directory and umask from the process's other threads; it
            // touches no memory, and the thread exits when `f` returns.
            unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::FS) }
                .map_err(io::Error::from)?;
            rustix::thread::move_into_link_name_space(
                std::os::fd::AsFd::as_fd(&ns),
                Some(rustix::thread::LinkNameSpaceType::Mount),
            )
            .map_err(io::Error::from)?;
            f()
        })
        .join()
        .map_err(|_| io::Error::other("pod mount namespace thread panicked"))?
    })
}

/// Hands the node's mounts at `paths` (each with what is mounted beneath
/// it) to the pod of monitor `pid`: each is attached at the same path in
/// the pod's namespace, then unmounted from the node's. On an error none
/// is moved: those attached are unmounted again, the node keeps its own.
pub fn adopt(pid: u32, paths: &[PathBuf]) -> io::Result<()> {
    use rustix::mount::{MoveMountFlags, OpenTreeFlags, UnmountFlags};
    if paths.is_empty() {
        return Ok(());
    }
    let trees = paths
        .iter()
        .map(|p| {
            rustix::mount::open_tree(
                rustix::fs::CWD,
                p,
                OpenTreeFlags::OPEN_TREE_CLONE
                    | OpenTreeFlags::OPEN_TREE_CLOEXEC
                    | OpenTreeFlags::AT_RECURSIVE,
            )
            .map_err(|e| io::Error::other(format!("clone the mount at {}: {e}", p.display())))
        })
        .collect::<io::Result<Vec<_>>>()?;
    within(pid, || {
        let mut attached: Vec<&PathBuf> = Vec::new();
        for (tree, p) in trees.iter().zip(paths) {
            let r = rustix::mount::move_mount(
                tree,
                "",
                rustix::fs::CWD,
                p,
                MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
            );
            if let Err(e) = r {
                for q in attached.iter().rev() {
                    let _ = rustix::mount::unmount(*q, UnmountFlags::DETACH);
                }
                return Err(io::Error::other(format!(
                    "attach {} in the pod's mount namespace: {e}",
                    p.display()
                )));
            }
            attached.push(p);
        }
        Ok(())
    })?;
    for p in paths.iter().rev() {
        match rustix::mount::unmount(p, UnmountFlags::DETACH) {
            Ok(()) | Err(rustix::io::Errno::INVAL) => {}
            Err(e) => tracing::warn!(mount = %p.display(), error = %e, "unmount what the pod took"),
        }
    }
    Ok(())
}

/// Hands the pod's pins to the monitor `pid` ([`adopt`]), a pod user
/// namespace's with the others: the pod's processes find each at its own
/// path ([`reach_namespaces`]), the server through the monitor's root, so
/// the user pin is named so from then on.
pub fn adopt_pins(
    pid: u32,
    pins: &[PathBuf],
    userns: Option<&mut super::userns::PodUserns>,
) -> io::Result<()> {
    let mut paths = pins.to_vec();
    paths.extend(userns.as_ref().map(|u| u.pin.clone()));
    adopt(pid, &paths)?;
    if let Some(u) = userns {
        u.pin = seen(pid, &u.pin);
    }
    Ok(())
}

/// The network namespace pinned at `pin` (a [`seen`] path or the node's),
/// held open: a pod's own mount namespace, and the pin in it, go when its
/// monitor exits, and a CNI DEL running meanwhile still has the namespace
/// by [`held_path`]. None: no namespace is pinned there.
pub fn hold_netns(pin: &Path) -> Option<File> {
    const NSFS_MAGIC: i64 = 0x6e73_6673;
    let f = File::open(pin).ok()?;
    let st = rustix::fs::fstatfs(&f).ok()?;
    (st.f_type as i64 == NSFS_MAGIC).then_some(f)
}

/// A path to what `f` (held by this process) is: for another process
/// (a CNI plugin) to open.
pub fn held_path(f: &File) -> PathBuf {
    use std::os::fd::AsRawFd;
    PathBuf::from(format!("/proc/{}/fd/{}", std::process::id(), f.as_raw_fd()))
}

/// Names each namespace path of `spec` as the runtime, inside the pod's
/// mount namespace, can join it: the pod's own pins (user, network, IPC,
/// UTS) at their own paths there, not through the monitor's root (which a
/// process already in the pod's user namespace cannot go through); one
/// the pod does not see as the node does (a plugin pinned it on the node
/// after the pod started) through the monitor's hold on the node's root.
pub fn reach_namespaces(pid: u32, spec: &mut serde_json::Value) {
    let Some(list) = spec
        .pointer_mut("/linux/namespaces")
        .and_then(|v| v.as_array_mut())
    else {
        return;
    };
    for ns in list {
        let Some(path) = ns.get("path").and_then(|p| p.as_str()).map(Path::new) else {
            continue;
        };
        // The pod's own pins, as the server reaches them: at their own
        // paths in the pod's namespace (through the monitor's root a
        // process already in the pod's user namespace could not go).
        if path.starts_with(format!("/proc/{pid}/root")) {
            ns["path"] = serde_json::json!(node_side(path).display().to_string());
            continue;
        }
        if path.starts_with("/proc") || same_in_pod(pid, path) {
            continue;
        }
        let at = crate::shim::client::node_root(Some(pid), path);
        ns["path"] = serde_json::json!(at.display().to_string());
    }
}

/// Whether `path` is the same file on the node and in the pod of monitor
/// `pid` (the pod's namespace sees a mount the node made after it was
/// made only where the node shares it).
pub fn same_in_pod(pid: u32, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(path), std::fs::metadata(seen(pid, path))) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_seen_path_goes_back_to_the_node_side() {
        let p = Path::new("/run/husk/ns/abc/net");
        let s = seen(4242, p);
        assert_eq!(s, Path::new("/proc/4242/root/run/husk/ns/abc/net"));
        assert_eq!(node_side(&s), p);
        assert_eq!(node_side(p), p);
        // Not a pid: not a seen path.
        let q = Path::new("/proc/self/root/x");
        assert_eq!(node_side(q), q);
    }

    /// A process in a mount namespace of its own (a slave of this one's),
    /// as a monitor is.
    fn pod_process(dir: &Path) -> std::process::Child {
        // A private mount of the test's own: nothing made under it reaches
        // the pod's namespace but by adoption, whatever the node shares.
        rustix::mount::mount("t", dir, "tmpfs", rustix::mount::MountFlags::empty(), c"").unwrap();
        rustix::mount::mount_change(dir, rustix::mount::MountPropagationFlags::PRIVATE).unwrap();
        std::process::Command::new("unshare")
            .args(["-m", "--propagation", "slave", "sleep", "60"])
            .spawn()
            .expect("unshare")
    }

    fn wait_own_ns(pid: u32) {
        let me = std::fs::read_link("/proc/self/ns/mnt").unwrap();
        for _ in 0..500 {
            if std::fs::read_link(format!("/proc/{pid}/ns/mnt")).is_ok_and(|n| n != me) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("the process never got its own mount namespace");
    }

    #[test]
    fn an_adopted_mount_is_the_pods_alone() {
        if !rustix::process::geteuid().is_root() {
            eprintln!("skipped: needs root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let mut child = pod_process(dir.path());
        let m = dir.path().join("m");
        std::fs::create_dir(&m).unwrap();
        let pid = child.id();
        wait_own_ns(pid);
        rustix::mount::mount("t", &m, "tmpfs", rustix::mount::MountFlags::empty(), c"").unwrap();
        std::fs::write(m.join("f"), "pod's").unwrap();
        adopt(pid, std::slice::from_ref(&m)).unwrap();
        // Gone from the node, there in the pod, reached through its root.
        assert!(!m.join("f").exists());
        assert!(!crate::sys::mounts_under(dir.path()).contains(&m));
        assert_eq!(
            std::fs::read_to_string(seen(pid, &m).join("f")).unwrap(),
            "pod's"
        );
        assert!(!same_in_pod(pid, &m));
        // Unmounted inside the pod's namespace, it is gone there too.
        within(pid, || {
            rustix::mount::unmount(&m, rustix::mount::UnmountFlags::empty())?;
            Ok(())
        })
        .unwrap();
        assert!(!seen(pid, &m).join("f").exists());
        assert!(same_in_pod(pid, &m));
        rustix::mount::unmount(dir.path(), rustix::mount::UnmountFlags::empty()).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn under_a_private_dir_nothing_propagates_elsewhere_the_node_and_pod_are_peers() {
        use rustix::mount::{mount, unmount, MountFlags, UnmountFlags};
        if !rustix::process::geteuid().is_root() {
            eprintln!("skipped: needs root");
            return;
        }
        // A node that shares its mounts (the test's own tmpfs), the
        // server's dir in it.
        let node = tempfile::tempdir().unwrap();
        let n = node.path().canonicalize().unwrap();
        mount("t", &n, "tmpfs", MountFlags::empty(), c"").unwrap();
        rustix::mount::mount_change(&n, rustix::mount::MountPropagationFlags::SHARED).unwrap();
        let (dir, vol) = (n.join("state"), n.join("vol"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::create_dir_all(&vol).unwrap();
        assert_eq!(keep_private(&[&dir]).unwrap(), vec![dir.clone()]);
        assert_eq!(crate::sys::propagates(&dir), Some(false));
        assert!(crate::sys::bound_onto_itself(&dir));
        assert!(!crate::sys::bound_onto_itself(&n));
        // Again: nothing more is bound.
        keep_private(&[&dir]).unwrap();
        assert_eq!(crate::sys::mounts_under(&dir), vec![dir.clone()]);
        let mut child = std::process::Command::new("unshare")
            .args(["-m", "--propagation", "unchanged", "sleep", "60"])
            .spawn()
            .unwrap();
        let pid = child.id();
        wait_own_ns(pid);
        let in_pod = |p: &Path| {
            std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
                .unwrap()
                .lines()
                .any(|l| l.split(' ').nth(4) == Some(p.to_str().unwrap()))
        };
        let (a, b, c, d) = (dir.join("a"), dir.join("b"), vol.join("c"), vol.join("d"));
        for x in [&a, &b, &c, &d] {
            std::fs::create_dir(x).unwrap();
        }
        // The node's mount under the dir stays the node's; the pod's, the pod's.
        mount("t", &a, "tmpfs", MountFlags::empty(), c"").unwrap();
        assert!(!in_pod(&a));
        within(pid, || {
            Ok(mount("t", &b, "tmpfs", MountFlags::empty(), c"")?)
        })
        .unwrap();
        assert!(in_pod(&b));
        assert!(!crate::sys::mounts_under(&dir).contains(&b));
        // Elsewhere, each sees what the other mounts.
        mount("t", &c, "tmpfs", MountFlags::empty(), c"").unwrap();
        assert!(in_pod(&c));
        within(pid, || {
            Ok(mount("t", &d, "tmpfs", MountFlags::empty(), c"")?)
        })
        .unwrap();
        assert!(crate::sys::mounts_under(&vol).contains(&d));
        child.kill().unwrap();
        child.wait().unwrap();
        unmount(&n, UnmountFlags::DETACH).unwrap();
        for m in crate::sys::mounts_under(&n) {
            let _ = unmount(&m, UnmountFlags::DETACH);
        }
    }

    #[test]
    fn a_dir_with_node_mounts_below_is_not_bound() {
        use rustix::mount::{mount, unmount, MountFlags, UnmountFlags};
        if !rustix::process::geteuid().is_root() {
            eprintln!("skipped: needs root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().canonicalize().unwrap();
        let pin = d.join("pods/p1/shm");
        std::fs::create_dir_all(&pin).unwrap();
        mount("t", &pin, "tmpfs", MountFlags::empty(), c"").unwrap();
        let e = keep_private(&[&d]).unwrap_err().to_string();
        assert!(
            e.contains("1 mounts under") && e.contains(pin.to_str().unwrap()),
            "{e}"
        );
        assert_eq!(can_keep_pods_mounts(&[&d]).unwrap_err().to_string(), e);
        // Nothing bound: the pod's mount is the only one there.
        assert_eq!(crate::sys::mounts_under(&d), vec![pin.clone()]);
        unmount(&pin, UnmountFlags::empty()).unwrap();
        can_keep_pods_mounts(&[&d, &d.join("not-made-yet")]).unwrap();
        assert_eq!(keep_private(&[&d]).unwrap(), vec![d.clone()]);
        // Private now: a mount below it (a pod's, on its way to the pod)
        // is no reason to refuse.
        mount("t", &pin, "tmpfs", MountFlags::empty(), c"").unwrap();
        can_keep_pods_mounts(&[&d]).unwrap();
        unmount(&pin, UnmountFlags::empty()).unwrap();
        // At the server's stop the bind goes, and only it.
        release_private(std::slice::from_ref(&d));
        assert_eq!(crate::sys::mounts_under(&d), Vec::<PathBuf>::new());
        release_private(std::slice::from_ref(&d));
    }

    #[test]
    fn a_failed_adoption_leaves_the_node_its_mounts() {
        if !rustix::process::geteuid().is_root() {
            eprintln!("skipped: needs root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        let mut child = pod_process(dir.path());
        std::fs::create_dir(&a).unwrap();
        let pid = child.id();
        wait_own_ns(pid);
        rustix::mount::mount("t", &a, "tmpfs", rustix::mount::MountFlags::empty(), c"").unwrap();
        // `b` is not there: nothing to clone, nothing moved.
        let e = adopt(pid, &[a.clone(), b.clone()]).unwrap_err();
        assert!(e.to_string().contains(&b.display().to_string()), "{e}");
        assert!(crate::sys::mounts_under(dir.path()).contains(&a));
        rustix::mount::unmount(&a, rustix::mount::UnmountFlags::empty()).unwrap();
        rustix::mount::unmount(dir.path(), rustix::mount::UnmountFlags::empty()).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
