//! Runs one libcontainer operation in a short-lived child of the shim.
//!
//! libcontainer touches a few megabytes of code and heap to create, start,
//! exec into or delete a container. Done in the monitor itself, all of it
//! would stay resident for the pod's lifetime; done in a forked child (as
//! conmon runs `runc`), it is gone when the child exits and the monitor
//! keeps only its poll loop resident.
//!
//! Processes the operation creates (a container's init, an exec'd process)
//! are children of the forked child; when it exits they are reparented to
//! the monitor, which is their subreaper, so the monitor reaps them as
//! before (a zombie reparented this way is reported to the new parent).
//!
//! The child reports back through a pipe: a tag byte (0 = ok, 1 = error),
//! then a little-endian i32 (ok) or a UTF-8 message (error). The monitor
//! waits for the child to exit before reading, so a process that inherited
//! the pipe (a created container's init keeps its fds until it execs)
//! cannot hold the reader up.

use libcontainer::workload::{Executor, ExecutorError, ExecutorValidationError};
use std::os::fd::OwnedFd;

/// Longest error message passed back (a pipe holds 64 KiB unread).
const MAX_MESSAGE: usize = 16 << 10;

/// Runs `op` in a forked child and returns what it returned. Must only be
/// called from the single-threaded monitor.
pub(super) fn in_child(op: impl FnOnce() -> Result<i32, String>) -> Result<i32, String> {
    let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| format!("pipe: {e}"))?;
    // SAFETY: the monitor is single-threaded, so the child may run any
    // code; it leaves through _exit and never returns into the loop.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        drop(r);
        let msg = match op() {
            Ok(v) => {
                let mut m = vec![0u8];
                m.extend_from_slice(&v.to_le_bytes());
                m
            }
            Err(e) => {
                let mut m = vec![1u8];
                let mut e = e.into_bytes();
                e.truncate(MAX_MESSAGE);
                m.extend_from_slice(&e);
                m
            }
        };
        write_all(&w, &msg);
        // SAFETY: leaves the child without running the monitor's
        // destructors or atexit handlers.
        unsafe { libc::_exit(0) }
    }
    drop(w);
    drop(op);
    wait_for(pid)?;
    let mut msg = Vec::new();
    rustix::io::ioctl_fionbio(&r, true).map_err(|e| format!("pipe: {e}"))?;
    let mut buf = [0u8; 4096];
    loop {
        match rustix::io::read(&r, &mut buf) {
            Ok(0) | Err(rustix::io::Errno::AGAIN) => break,
            Ok(n) => msg.extend_from_slice(&buf[..n]),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(format!("read from the operation: {e}")),
        }
    }
    match msg.split_first() {
        Some((0, v)) if v.len() == 4 => Ok(i32::from_le_bytes([v[0], v[1], v[2], v[3]])),
        Some((1, e)) => Err(String::from_utf8_lossy(e).into_owned()),
        _ => Err("the operation's process died without an answer (see shim.log)".into()),
    }
}

fn write_all(fd: &OwnedFd, mut b: &[u8]) {
    while !b.is_empty() {
        match rustix::io::write(fd, b) {
            Ok(n) => b = &b[n..],
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return,
        }
    }
}

fn wait_for(pid: libc::pid_t) -> Result<(), String> {
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: waitpid on our own child with a valid out-pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(format!("wait for the operation's process: {e}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::in_child;

    #[test]
    fn values_and_errors_come_back_from_the_child() {
        assert_eq!(in_child(|| Ok(42)), Ok(42));
        assert_eq!(
            in_child(|| Err("no such container".into())),
            Err("no such container".to_string())
        );
        let long = "x".repeat(100_000);
        let e = in_child(move || Err(long)).expect_err("an error");
        assert_eq!(e.len(), 16 << 10);
    }

    #[test]
    fn a_child_that_dies_is_an_error() {
        // SAFETY: abort in the forked child only.
        let e = in_child(|| -> Result<i32, String> { unsafe { libc::_exit(3) } })
            .expect_err("an error");
        assert!(e.contains("died"), "{e}");
    }
}

/// The executor of a container's init: husk's last steps before the
/// payload's execve (`payload.rs`), then libcontainer's.
#[derive(Clone)]
pub(super) struct ResetSignals;

impl Executor for ResetSignals {
    fn exec(&self, spec: &libcontainer::oci_spec::runtime::Spec) -> Result<(), ExecutorError> {
        super::payload::before_execve()?;
        super::lookpath::exec(spec)
    }

    fn validate(
        &self,
        spec: &libcontainer::oci_spec::runtime::Spec,
    ) -> Result<(), ExecutorValidationError> {
        super::lookpath::validate(spec)
    }
}
