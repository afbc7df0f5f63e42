//! A pod's user namespace, and its network, IPC and UTS namespaces owned
//! by it, made by a short-lived child process and pinned with bind mounts.
//!
//! A user namespace cannot be entered by one thread of a multi-threaded
//! process, so a forked child does the work: it `unshare`s the user
//! namespace together with the others (the kernel makes the user namespace
//! first and the others owned by it), sets the hostname and brings `lo` up,
//! and waits. The parent writes the uid and gid maps, bind-mounts the
//! child's `/proc/<pid>/ns/*` onto the pins, and lets it exit. Between the
//! fork and its exit the child makes raw system calls only.
//!
//! Namespaces owned by the pod's user namespace are what lets the pod's
//! root mount sysfs (network), mqueue (IPC) and set its hostname (UTS),
//! and what lets a container that has joined the user namespace join them
//! at all.

use super::range::IdRange;
use crate::network::netns::{self, Kind};
use std::ffi::CString;
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// A child holding a new user namespace (and whatever was unshared with
/// it) until it is dropped.
pub struct Holder {
    pid: libc::pid_t,
    release: Option<OwnedFd>,
}

impl Holder {
    /// `/proc/<pid>/ns/<name>` of the holder.
    pub fn ns_path(&self, name: &str) -> PathBuf {
        PathBuf::from(format!("/proc/{}/ns/{name}", self.pid))
    }

    /// Writes the uid and gid maps of the holder's user namespace.
    pub fn map(&self, uids: IdRange, gids: IdRange) -> io::Result<()> {
        let line = |r: IdRange| format!("{} {} {}\n", r.container_id, r.host_id, r.length);
        fs::write(format!("/proc/{}/uid_map", self.pid), line(uids))?;
        fs::write(format!("/proc/{}/gid_map", self.pid), line(gids))?;
        Ok(())
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        // A byte on the pipe lets the child exit; then it is reaped.
        if let Some(fd) = self.release.take() {
            // SAFETY: writes one byte from a valid buffer.
            unsafe { libc::write(fd.as_raw_fd(), [1u8].as_ptr().cast(), 1) };
        }
        let mut status = 0;
        // SAFETY: pid is this process's child, reaped only here.
        unsafe { libc::waitpid(self.pid, &mut status, 0) };
    }
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid two-int array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 returned two new descriptors owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Forks a child that unshares a user namespace plus `flags` (CLONE_NEW*),
/// sets `hostname` when it has a new UTS namespace, brings `lo` up when
/// `lo_up`, and waits until the returned holder is dropped.
pub fn hold(flags: libc::c_int, hostname: Option<&str>, lo_up: bool) -> io::Result<Holder> {
    let host = hostname.map(CString::new).transpose()?;
    let (ready_r, ready_w) = pipe()?;
    let (release_r, release_w) = pipe()?;
    // SAFETY: the child makes only async-signal-safe system calls on
    // memory prepared before the fork, and leaves with _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: see above; every pointer is valid for the call.
        unsafe {
            // Only its two pipe ends stay open: descriptors other threads
            // opened must not be held here.
            let (a, b) = {
                let (x, y) = (ready_w.as_raw_fd() as u32, release_r.as_raw_fd() as u32);
                (x.min(y), x.max(y))
            };
            libc::syscall(libc::SYS_close_range, 3u32, a.saturating_sub(1), 0u32);
            libc::syscall(libc::SYS_close_range, a + 1, b - 1, 0u32);
            libc::syscall(libc::SYS_close_range, b + 1, u32::MAX, 0u32);
            let mut err: libc::c_int = 0;
            if libc::unshare(libc::CLONE_NEWUSER | flags) < 0 {
                err = *libc::__errno_location();
            }
            if err == 0 && flags & libc::CLONE_NEWUTS != 0 {
                if let Some(h) = &host {
                    if libc::sethostname(h.as_ptr(), h.as_bytes().len()) < 0 {
                        err = *libc::__errno_location();
                    }
                }
            }
            if err == 0 && lo_up && flags & libc::CLONE_NEWNET != 0 {
                err = child_lo_up();
            }
            libc::write(
                ready_w.as_raw_fd(),
                (&err as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>(),
            );
            let mut b = 0u8;
            libc::read(release_r.as_raw_fd(), (&mut b as *mut u8).cast(), 1);
            libc::_exit(0);
        }
    }
    drop(ready_w);
    drop(release_r);
    let holder = Holder {
        pid,
        release: Some(release_w),
    };
    let mut err: libc::c_int = -1;
    // SAFETY: reads one c_int into err.
    let n = unsafe {
        libc::read(
            ready_r.as_raw_fd(),
            (&mut err as *mut libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>(),
        )
    };
    if n != std::mem::size_of::<libc::c_int>() as isize {
        return Err(io::Error::other(
            "the namespace child died before it was ready",
        ));
    }
    if err != 0 {
        return Err(io::Error::from_raw_os_error(err));
    }
    Ok(holder)
}

/// `lo` up in the child's network namespace; 0 or an errno.
///
/// # Safety
/// Called only in the forked child: raw system calls on stack memory.
unsafe fn child_lo_up() -> libc::c_int {
    let sock = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
    if sock < 0 {
        return *libc::__errno_location();
    }
    let fd = std::os::fd::BorrowedFd::borrow_raw(sock);
    let err = match netns::set_up(&fd, "lo") {
        Ok(()) => 0,
        Err(e) => e.raw_os_error().unwrap_or(libc::EIO),
    };
    libc::close(sock);
    err
}

/// Creates a user namespace with the given maps pinned at `user_pin`, and
/// a namespace of each kind in `pins` owned by it, pinned at its path
/// (none of which may exist). Inside, sets `hostname` (UTS) and brings
/// `lo` up when `lo_up` (network). On an error no pin is left.
pub fn create_pod(
    user_pin: &Path,
    pins: &[(Kind, PathBuf)],
    uids: IdRange,
    gids: IdRange,
    hostname: Option<&str>,
    lo_up: bool,
) -> io::Result<()> {
    let all: Vec<(&str, &Path)> = std::iter::once(("user", user_pin))
        .chain(pins.iter().map(|(k, p)| (k.proc_name(), p.as_path())))
        .collect();
    let paths: Vec<&Path> = all.iter().map(|(_, p)| *p).collect();
    netns::with_new_pins(&paths, || {
        let flags = pins
            .iter()
            .fold(0, |f, (k, _)| f | k.flag().bits() as libc::c_int);
        let holder = hold(flags, hostname, lo_up)?;
        holder.map(uids, gids)?;
        for (name, target) in &all {
            rustix::mount::mount_bind(holder.ns_path(name), *target).map_err(io::Error::from)?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn a_pods_namespaces_inside_its_user_namespace() {
        if !rustix::process::geteuid().is_root() {
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let user = dir.path().join("ns").join("user");
        let pins: Vec<(Kind, PathBuf)> = [Kind::Net, Kind::Uts, Kind::Ipc]
            .into_iter()
            .map(|k| (k, dir.path().join("ns").join(k.proc_name())))
            .collect();
        let r = IdRange {
            container_id: 0,
            host_id: 200000,
            length: 65536,
        };
        create_pod(&user, &pins, r, r, Some("in-userns"), true).expect("create");
        let out = std::process::Command::new("nsenter")
            .arg(format!("--user={}", user.display()))
            .arg(format!("--net={}", pins[0].1.display()))
            .arg(format!("--uts={}", pins[1].1.display()))
            .args(["sh", "-c", "cat /proc/self/uid_map; hostname; id -u"])
            .output()
            .expect("nsenter");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let words: Vec<&str> = text.split_whitespace().collect();
        assert_eq!(words, ["0", "200000", "65536", "in-userns", "0"], "{text}");
        let own = fs::metadata("/proc/self/ns/user").expect("own").ino();
        assert_ne!(fs::metadata(&user).expect("pin").ino(), own);
        // A pin that exists: an error, and none of the others is left.
        let user2 = dir.path().join("user2");
        let again = vec![
            (Kind::Ipc, dir.path().join("other-ipc")),
            (Kind::Net, pins[0].1.clone()),
        ];
        assert!(create_pod(&user2, &again, r, r, None, false).is_err());
        assert!(!dir.path().join("other-ipc").exists());
        assert!(!user2.exists());
        netns::remove(&user).expect("remove");
        for (_, p) in &pins {
            netns::remove(p).expect("remove");
        }
        assert!(crate::sys::mounts_under(dir.path()).is_empty());
    }
}
