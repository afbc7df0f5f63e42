//! Network (and other) namespaces pinned with bind mounts, so they outlive
//! the processes in them and can be joined by path.
//!
//! A pod's namespaces are created on a short-lived OS thread that
//! `unshare`s them at once and bind-mounts each `/proc/thread-self/ns/<kind>`
//! onto an empty file; the thread then exits and the server's own
//! namespaces are untouched. Removal is a
//! lazy unmount and an unlink, both idempotent. Work inside a namespace
//! (bringing `lo` up) also runs on a dedicated thread that `setns`es.

use std::fs;
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

/// A kind of namespace that can be pinned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Net,
    Ipc,
    Uts,
}

impl Kind {
    /// Its name under /proc/<pid>/ns.
    pub fn proc_name(self) -> &'static str {
        match self {
            Kind::Net => "net",
            Kind::Ipc => "ipc",
            Kind::Uts => "uts",
        }
    }

    /// Its `CLONE_NEW*` flag.
    pub(crate) fn flag(self) -> rustix::thread::UnshareFlags {
        use rustix::thread::UnshareFlags as F;
        match self {
            Kind::Net => F::NEWNET,
            Kind::Ipc => F::NEWIPC,
            Kind::Uts => F::NEWUTS,
        }
    }
}

/// Creates a new namespace of `kind` pinned at `path` (which must not
/// exist). For UTS, `hostname` is set inside it.
pub fn create(kind: Kind, path: &Path, hostname: Option<&str>) -> io::Result<()> {
    create_set(&[(kind, path.to_path_buf())], hostname, false)
}

/// Creates a namespace of each kind in `pins`, pinned at its path (which
/// must not exist), with one `unshare` on one thread; inside, sets
/// `hostname` (UTS) and brings `lo` up when `lo_up` (network). On an error
/// no pin is left.
pub fn create_set(pins: &[(Kind, PathBuf)], hostname: Option<&str>, lo_up: bool) -> io::Result<()> {
    let paths: Vec<&Path> = pins.iter().map(|(_, p)| p.as_path()).collect();
    with_new_pins(&paths, || {
        let pins = pins.to_vec();
        let hostname = hostname.map(str::to_string);
        std::thread::spawn(move || -> io::Result<()> {
            let flags = pins
                .iter()
                .fold(rustix::thread::UnshareFlags::empty(), |f, (k, _)| {
                    f | k.flag()
                });
            // SAFETY: NEWNET, NEWIPC and NEWUTS change only this thread's
            // namespaces, and this thread exits right after; no memory or
            // file descriptor state is affected.
            unsafe { rustix::thread::unshare_unsafe(flags) }.map_err(io::Error::from)?;
            let has = |k: Kind| pins.iter().any(|(p, _)| *p == k);
            if let (Some(h), true) = (hostname, has(Kind::Uts)) {
                rustix::system::sethostname(h.as_bytes()).map_err(io::Error::from)?;
            }
            if lo_up && has(Kind::Net) {
                let sock = rustix::net::socket(
                    rustix::net::AddressFamily::INET,
                    rustix::net::SocketType::DGRAM,
                    None,
                )?;
                set_up(&sock, "lo")?;
            }
            for (kind, target) in &pins {
                let src = format!("/proc/thread-self/ns/{}", kind.proc_name());
                rustix::mount::mount_bind(src.as_str(), target).map_err(io::Error::from)?;
            }
            Ok(())
        })
        .join()
        .map_err(|_| io::Error::other("namespace thread panicked"))?
    })
}

/// Creates each of `paths` as an empty pin file (its directory too; none
/// may exist), then runs `pin`, which binds namespaces onto them. When
/// either fails, no pin is left.
pub(crate) fn with_new_pins(
    paths: &[&Path],
    pin: impl FnOnce() -> io::Result<()>,
) -> io::Result<()> {
    let mut made: Vec<&Path> = Vec::new();
    let result = (|| {
        for path in paths {
            if let Some(dir) = path.parent() {
                crate::store::modes::make_private(dir)?;
            }
            fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)?;
            made.push(path);
        }
        pin()
    })();
    if result.is_err() {
        for p in made {
            let _ = remove(p);
        }
    }
    result
}

/// Unpins and removes a namespace file; a missing one is not an error.
pub fn remove(path: &Path) -> io::Result<()> {
    match rustix::mount::unmount(path, rustix::mount::UnmountFlags::DETACH) {
        Ok(()) | Err(rustix::io::Errno::INVAL) | Err(rustix::io::Errno::NOENT) => {}
        Err(e) => return Err(e.into()),
    }
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Runs `f` on a thread that has joined the network namespace at `path`.
pub fn in_netns<T: Send + 'static>(
    path: &Path,
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    in_namespace(path, rustix::thread::LinkNameSpaceType::Network, f)
}

/// Runs `f` in each network namespace of `paths`, in turn, on one thread
/// (one thread for a node's pods, not one a pod); a namespace that cannot
/// be opened or joined gets its error, and the next is tried.
pub fn in_each_netns<T: Send + 'static>(
    paths: Vec<std::path::PathBuf>,
    f: impl Fn() -> io::Result<T> + Send + 'static,
) -> Vec<io::Result<T>> {
    let n = paths.len();
    std::thread::spawn(move || {
        paths
            .iter()
            .map(|path| {
                let ns = fs::File::open(path)?;
                rustix::thread::move_into_link_name_space(
                    ns.as_fd(),
                    Some(rustix::thread::LinkNameSpaceType::Network),
                )
                .map_err(io::Error::from)?;
                f()
            })
            .collect()
    })
    .join()
    .unwrap_or_else(|_| {
        (0..n)
            .map(|_| Err(io::Error::other("namespace thread panicked")))
            .collect()
    })
}

/// Runs `f` on a thread that has joined the namespace of `kind` at `path`.
fn in_namespace<T: Send + 'static>(
    path: &Path,
    kind: rustix::thread::LinkNameSpaceType,
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    in_namespaces(&[(path, kind)], f)
}

/// Runs `f` on a thread that has joined each namespace of `joins` (a
/// pinned path and its kind), in order.
fn in_namespaces<T: Send + 'static>(
    joins: &[(&Path, rustix::thread::LinkNameSpaceType)],
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    let files = joins
        .iter()
        .map(|(path, kind)| Ok((fs::File::open(path)?, *kind)))
        .collect::<io::Result<Vec<_>>>()?;
    std::thread::spawn(move || {
        for (ns, kind) in &files {
            rustix::thread::move_into_link_name_space(ns.as_fd(), Some(*kind))
                .map_err(io::Error::from)?;
        }
        f()
    })
    .join()
    .map_err(|_| io::Error::other("namespace thread panicked"))?
}

/// Sets the host name inside the UTS namespace pinned at `path`.
pub fn set_hostname(path: &Path, hostname: &str) -> io::Result<()> {
    let name = hostname.to_string();
    in_namespace(
        path,
        rustix::thread::LinkNameSpaceType::HostNameAndNISDomainName,
        move || rustix::system::sethostname(name.as_bytes()).map_err(io::Error::from),
    )
}

/// The path under `/proc/sys` of a sysctl key: dots separate its parts,
/// and a slash stands for a dot inside a part (`net.ipv4.conf.eth0/100.x`
/// is `net/ipv4/conf/eth0.100/x`), as the kubelet sends such names. None
/// when a part is empty, `.` or `..`.
pub fn sysctl_path(key: &str) -> Option<String> {
    let path: String = key
        .chars()
        .map(|c| match c {
            '.' => '/',
            '/' => '.',
            c => c,
        })
        .collect();
    path.split('/')
        .all(|p| !p.is_empty() && p != "." && p != "..")
        .then_some(path)
}

/// Writes each of `sysctls` on one thread that has joined the network
/// namespace at `net` and the IPC namespace at `ipc` (a key's namespace is
/// the one the kernel keeps it in: the caller checks that it is the pod's
/// own). The error names the key.
pub fn set_sysctls(
    net: Option<&Path>,
    ipc: Option<&Path>,
    sysctls: &[(String, String)],
) -> io::Result<()> {
    if sysctls.is_empty() {
        return Ok(());
    }
    use rustix::thread::LinkNameSpaceType as T;
    let joins: Vec<(&Path, T)> = [(net, T::Network), (ipc, T::InterProcessCommunication)]
        .into_iter()
        .filter_map(|(path, kind)| path.map(|p| (p, kind)))
        .collect();
    let sysctls = sysctls.to_vec();
    in_namespaces(&joins, move || {
        for (key, value) in &sysctls {
            let path = sysctl_path(key).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("sysctl {key:?}: not a sysctl name"),
                )
            })?;
            write_sysctl(&path, value).map_err(|e| {
                let what = if e.kind() == io::ErrorKind::NotFound {
                    "no such sysctl".to_string()
                } else {
                    e.to_string()
                };
                io::Error::new(e.kind(), format!("sysctl {key}={value:?}: {what}"))
            })?;
        }
        Ok(())
    })
}

/// Writes `value` to `/proc/sys/<path>` of the server's own procfs through
/// a handle opened without following any symlink or magic link, and
/// checked to be on procfs before the write: what the pod can reach never
/// decides where a sysctl lands.
fn write_sysctl(path: &str, value: &str) -> io::Result<()> {
    use rustix::fs::{OFlags, ResolveFlags};
    const PROC_SUPER_MAGIC: i64 = 0x9fa0;
    let fd = rustix::fs::openat2(
        rustix::fs::CWD,
        format!("/proc/sys/{path}"),
        OFlags::WRONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        rustix::fs::Mode::empty(),
        ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )?;
    #[allow(clippy::unnecessary_cast)]
    let magic = rustix::fs::fstatfs(&fd)?.f_type as i64;
    if magic != PROC_SUPER_MAGIC {
        return Err(io::Error::other(format!(
            "/proc/sys/{path} is not on procfs (magic {magic:#x})"
        )));
    }
    rustix::io::write(&fd, value.as_bytes())?;
    Ok(())
}

/// Brings the loopback interface up inside the netns at `path`.
pub fn loopback_up(path: &Path) -> io::Result<()> {
    in_netns(path, || {
        let sock = rustix::net::socket(
            rustix::net::AddressFamily::INET,
            rustix::net::SocketType::DGRAM,
            None,
        )?;
        set_up(&sock, "lo")
    })
}

/// Brings `ifname` up through the socket `sock`. Only two ioctls on stack
/// memory: a forked child may call it too.
pub(crate) fn set_up(sock: &impl AsFd, ifname: &str) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(ifname.as_bytes()) {
        *d = *s as libc::c_char;
    }
    let fd = sock.as_fd().as_raw_fd();
    // SAFETY: fd is an open socket; req is a valid ifreq for SIOCGIFFLAGS.
    if unsafe { libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the union member ifru_flags is the one SIOCGIFFLAGS filled.
    unsafe {
        req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    }
    // SAFETY: as above, for SIOCSIFFLAGS.
    if unsafe { libc::ioctl(fd, libc::SIOCSIFFLAGS, &req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Interface names in the netns at `path` (from /sys, read inside it).
pub fn interfaces(path: &Path) -> io::Result<Vec<String>> {
    in_netns(path, || {
        // /sys/class/net shows the namespace of the mounting process, so
        // read the kernel's per-netns list instead.
        let text = fs::read_to_string("/proc/thread-self/net/dev")?;
        Ok(text
            .lines()
            .skip(2)
            .filter_map(|l| l.split(':').next().map(|s| s.trim().to_string()))
            .collect())
    })
}

/// The pin path for a sandbox's namespace of `kind` under `state`.
pub fn pin_path(state: &Path, kind: Kind, sandbox_id: &str) -> PathBuf {
    state.join("ns").join(sandbox_id).join(kind.proc_name())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_join_and_remove_a_netns() {
        if !rustix::process::geteuid().is_root() {
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("net");
        create(Kind::Net, &p, None).expect("create");
        assert_eq!(interfaces(&p).expect("ifaces"), vec!["lo".to_string()]);
        loopback_up(&p).expect("lo up");
        let host = fs::read_link("/proc/self/ns/net").expect("host ns");
        let inside = in_netns(&p, || fs::read_link("/proc/thread-self/ns/net")).expect("inside");
        assert_ne!(host, inside, "a different namespace");
        assert!(
            create(Kind::Net, &p, None).is_err(),
            "an existing pin is not replaced"
        );
        remove(&p).expect("remove");
        remove(&p).expect("idempotent");
        assert!(!p.exists());

        let u = dir.path().join("uts");
        create(Kind::Uts, &u, Some("pod-host")).expect("uts");
        remove(&u).expect("remove uts");
    }

    #[test]
    fn each_namespace_of_a_list_is_joined_in_turn_on_one_thread() {
        if !rustix::process::geteuid().is_root() {
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        create(Kind::Net, &a, None).expect("a");
        create(Kind::Net, &b, None).expect("b");
        let id = |p: &Path| {
            let p = p.to_path_buf();
            in_netns(&p, || fs::read_link("/proc/thread-self/ns/net")).expect("ns")
        };
        let (ida, idb) = (id(&a), id(&b));
        let host = fs::read_link("/proc/self/ns/net").expect("host ns");
        let got = in_each_netns(vec![a.clone(), dir.path().join("gone"), b.clone()], || {
            Ok((
                fs::read_link("/proc/thread-self/ns/net")?,
                std::thread::current().id(),
            ))
        });
        assert_eq!(got.len(), 3);
        let (first, t1) = got[0].as_ref().expect("a read");
        let (third, t3) = got[2].as_ref().expect("b read after a missing pin");
        assert_eq!(
            (first, third),
            (&ida, &idb),
            "each read in its own namespace"
        );
        assert_eq!(t1, t3, "one thread for the list");
        assert_ne!(
            *t1,
            std::thread::current().id(),
            "never the caller's thread"
        );
        assert_eq!(
            got[1].as_ref().map(|_| ()).map_err(|e| e.kind()),
            Err(io::ErrorKind::NotFound),
            "a missing pin gets its own error"
        );
        assert_eq!(fs::read_link("/proc/self/ns/net").expect("host"), host);
        assert!(in_each_netns(Vec::new(), || Ok(())).is_empty());
        remove(&a).expect("remove a");
        remove(&b).expect("remove b");
    }

    #[test]
    fn sysctl_names_map_to_proc_sys_paths_and_never_climb() {
        assert_eq!(
            sysctl_path("net.ipv4.ip_forward").as_deref(),
            Some("net/ipv4/ip_forward")
        );
        assert_eq!(
            sysctl_path("net.ipv4.conf.eth0/100.forwarding").as_deref(),
            Some("net/ipv4/conf/eth0.100/forwarding")
        );
        for bad in [
            "net.//.kernel.core_pattern",
            "net..x",
            "net.",
            ".net",
            "net./.x",
        ] {
            assert_eq!(sysctl_path(bad), None, "{bad}");
        }
    }

    #[test]
    fn sysctls_are_set_in_the_pinned_namespaces_only() {
        if !rustix::process::geteuid().is_root() {
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let (n, i) = (dir.path().join("net"), dir.path().join("ipc"));
        create_set(
            &[(Kind::Net, n.clone()), (Kind::Ipc, i.clone())],
            None,
            false,
        )
        .expect("pins");
        let key = "net/ipv4/ip_unprivileged_port_start";
        let host = fs::read_to_string(format!("/proc/sys/{key}")).expect("host value");
        let host_shm = fs::read_to_string("/proc/sys/kernel/shmmni").expect("host shmmni");
        set_sysctls(
            Some(&n),
            Some(&i),
            &[
                ("net.ipv4.ip_unprivileged_port_start".into(), "77".into()),
                ("kernel.shmmni".into(), "1234".into()),
            ],
        )
        .expect("set");
        let inside = in_netns(&n, move || fs::read_to_string(format!("/proc/sys/{key}")));
        assert_eq!(inside.expect("read inside").trim(), "77");
        let shm = in_namespace(
            &i,
            rustix::thread::LinkNameSpaceType::InterProcessCommunication,
            || fs::read_to_string("/proc/sys/kernel/shmmni"),
        );
        assert_eq!(shm.expect("shmmni inside").trim(), "1234");
        assert_eq!(
            fs::read_to_string(format!("/proc/sys/{key}")).expect("host value after"),
            host
        );
        assert_eq!(
            fs::read_to_string("/proc/sys/kernel/shmmni").expect("host shmmni after"),
            host_shm
        );
        let err = set_sysctls(
            Some(&n),
            None,
            &[("net.ipv4.no_such_knob".into(), "1".into())],
        )
        .expect_err("unknown");
        assert!(err.to_string().contains("no such sysctl"), "{err}");
        remove(&n).expect("remove net");
        remove(&i).expect("remove ipc");
    }

    #[test]
    fn a_pods_namespaces_at_once_and_nothing_left_on_failure() {
        if !rustix::process::geteuid().is_root() {
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let pins: Vec<(Kind, PathBuf)> = [Kind::Net, Kind::Uts, Kind::Ipc]
            .into_iter()
            .map(|k| (k, dir.path().join("ns").join(k.proc_name())))
            .collect();
        create_set(&pins, Some("pod-set"), true).expect("create");
        let net = &pins[0].1;
        let lo = std::process::Command::new("nsenter")
            .arg(format!("--net={}", net.display()))
            .args(["ip", "-o", "link", "show", "lo"])
            .output()
            .expect("nsenter ip");
        let lo = String::from_utf8_lossy(&lo.stdout);
        assert!(lo.contains(",UP"), "lo is up: {lo}");
        let uts = std::process::Command::new("nsenter")
            .arg(format!("--uts={}", pins[1].1.display()))
            .arg("hostname")
            .output()
            .expect("nsenter hostname");
        assert_eq!(String::from_utf8_lossy(&uts.stdout).trim(), "pod-set");
        // One unshare: the three pins are three new namespaces, distinct
        // from the server's.
        for (kind, p) in &pins {
            let pinned = fs::metadata(p).expect("pin");
            let own = fs::metadata(format!("/proc/self/ns/{}", kind.proc_name())).expect("own");
            use std::os::unix::fs::MetadataExt;
            assert_ne!(pinned.ino(), own.ino(), "{kind:?}");
        }
        // A pin path that exists already: an error, and none of the others
        // is left behind.
        let again: Vec<(Kind, PathBuf)> = vec![
            (Kind::Ipc, dir.path().join("other-ipc")),
            (Kind::Net, net.clone()),
        ];
        assert!(create_set(&again, None, false).is_err());
        assert!(!dir.path().join("other-ipc").exists());
        for (_, p) in &pins {
            remove(p).expect("remove");
            assert!(!p.exists());
        }
    }
}
