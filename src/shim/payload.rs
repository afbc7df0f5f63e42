//! The last steps of every process husk starts in a container (a
//! container's init, an exec'd process), right before its execve.
//!
//! - The signal mask and SIGPIPE are reset: the Rust runtime ignores
//!   SIGPIPE and libcontainer blocks signals, and neither may leak into a
//!   container.
//! - The working directory must be inside the container's root. A
//!   `cwd` such as `/proc/self/fd/N` names a descriptor that the process
//!   still holds at its chdir (CVE-2024-21626, attack 1); the kernel then
//!   reports the directory as unreachable from the process's root.
//! - Every descriptor above stderr is closed, not only marked
//!   close-on-exec: execve resolves its path while close-on-exec
//!   descriptors are still open, so an argv[0] of
//!   `/proc/self/fd/N/self/root/...` would otherwise reach the node's
//!   procfs through libcontainer's own handle (CVE-2024-21626, attack 3).
//!   The descriptors a container is meant to have are 0, 1 and 2: the CRI
//!   passes no others.

use libcontainer::workload::ExecutorError;

/// Runs the steps above; an error stops the process before its execve.
pub(super) fn before_execve() -> Result<(), ExecutorError> {
    reset_signals();
    cwd_inside_root()?;
    close_from(3)
}

fn reset_signals() {
    // SAFETY: plain libc calls on a zeroed sigset in a single-threaded
    // process about to execve.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// The kernel's getcwd(2) (not glibc's, which hides the marker) starts
/// its answer with "(unreachable)" when the directory is not under the
/// process's root.
fn cwd_inside_root() -> Result<(), ExecutorError> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: getcwd writes at most buf.len() bytes into buf.
    let n = unsafe { libc::syscall(libc::SYS_getcwd, buf.as_mut_ptr(), buf.len()) };
    if n < 0 {
        return Err(ExecutorError::Other(format!(
            "the working directory: {}",
            std::io::Error::last_os_error()
        )));
    }
    if buf.first() != Some(&b'/') {
        let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
        return Err(ExecutorError::Other(format!(
            "the working directory {:?} is outside the container's root",
            String::from_utf8_lossy(&buf[..end])
        )));
    }
    Ok(())
}

/// close_range(2), or, where the container's seccomp filter (loaded
/// before this step) refuses it, one close(2) per descriptor listed in
/// /proc/self/fd.
fn close_from(first: u32) -> Result<(), ExecutorError> {
    // SAFETY: close_range(2) on descriptors this process owns; nothing
    // runs after it but execve.
    let r = unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, 0u32) };
    if r == 0 {
        return Ok(());
    }
    let listed: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .map_err(|e| ExecutorError::Other(format!("list inherited descriptors: {e}")))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    for fd in listed.into_iter().filter(|fd| *fd >= first as i32) {
        // SAFETY: closes a descriptor of this process (the listing's own
        // is gone already, and EBADF for it is harmless).
        unsafe { libc::close(fd) };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `f` in a forked child (closing descriptors in the test
    /// process would take the harness's) and returns its exit status.
    fn in_fork(f: impl FnOnce() -> i32) -> i32 {
        // SAFETY: the child runs `f` and leaves through _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork");
        if pid == 0 {
            let code = f();
            // SAFETY: leaves the child without running the harness's code.
            unsafe { libc::_exit(code) }
        }
        let mut status = 0;
        // SAFETY: waitpid on our own child with a valid out-pointer.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status), "status {status}");
        libc::WEXITSTATUS(status)
    }

    fn is_open(fd: i32) -> bool {
        // SAFETY: F_GETFD only asks whether the number is open.
        unsafe { libc::fcntl(fd, libc::F_GETFD) >= 0 }
    }

    #[test]
    fn descriptors_above_stderr_are_closed() {
        let code = in_fork(|| {
            let Ok(f) = std::fs::File::open("/proc/self/status") else {
                return 10;
            };
            let fd = std::os::fd::IntoRawFd::into_raw_fd(f);
            if !is_open(fd) {
                return 11;
            }
            if close_from(3).is_err() {
                return 12;
            }
            match (is_open(fd), is_open(2)) {
                (false, true) => 0,
                (true, _) => 13,
                (_, false) => 14,
            }
        });
        assert_eq!(code, 0);
    }

    #[test]
    fn a_cwd_outside_the_root_is_refused() {
        let code = in_fork(|| {
            if cwd_inside_root().is_err() {
                return 10;
            }
            // A new root below the cwd leaves the cwd unreachable.
            let Ok(dir) = tempfile::tempdir() else {
                return 11;
            };
            let Ok(c) = std::ffi::CString::new(dir.path().as_os_str().as_encoded_bytes()) else {
                return 12;
            };
            // SAFETY: chroot on a valid C string, in the child only.
            if unsafe { libc::chroot(c.as_ptr()) } != 0 {
                return 13;
            }
            match cwd_inside_root() {
                Err(e) if e.to_string().contains("outside the container's root") => 0,
                _ => 14,
            }
        });
        assert_eq!(code, 0);
    }
}
