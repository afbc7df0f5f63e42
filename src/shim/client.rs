//! The server's side of the shim API: starting a shim and calling it.
//! Blocking std I/O; async callers wrap calls in `spawn_blocking`.

use super::wire::{read_msg, write_msg};
use crate::api::shim::{ShimRequest, ShimResponse};
use std::io;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Set in a monitor's environment when it is to unshare a mount namespace
/// of its own at its start (`crate::sandbox::podns`): the server's dirs,
/// colon-separated, under which the monitor's new namespace drops what it
/// copied (other pods' mounts being made at that moment).
pub const MOUNT_NS_ENV: &str = "HUSK_SHIM_OWN_MOUNT_NS";

static OWN_MOUNT_NS: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// Whether the monitors this server starts keep their pods' mounts in a
/// mount namespace of their own (`mount_namespace = "pod"`), and the
/// server's dirs (its root and state) in which they mount; set once at the
/// server's start.
pub fn set_own_mount_ns(dirs: Option<&[std::path::PathBuf]>) {
    let v = dirs.map(|d| {
        d.iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(":")
    });
    *OWN_MOUNT_NS.lock().unwrap_or_else(|p| p.into_inner()) = v;
}

/// See [`set_own_mount_ns`].
pub fn own_mount_ns() -> bool {
    OWN_MOUNT_NS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .is_some()
}

/// The server's dirs the pods' mounts are made under (see
/// [`set_own_mount_ns`]); none in node mode.
pub fn own_mount_ns_dirs() -> Vec<std::path::PathBuf> {
    OWN_MOUNT_NS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_deref()
        .map(|d| {
            d.split(':')
                .filter(|x| !x.is_empty())
                .map(Into::into)
                .collect()
        })
        .unwrap_or_default()
}

/// The descriptor at which a monitor with its own mount namespace holds
/// the node's root, opened before it unshared (the first one free).
pub const NODE_ROOT_FD: i32 = 3;

/// `path` as the node names it, reached from inside the pod's mount
/// namespace through the node's root that the monitor `pid` holds: a
/// mount the node made since the pod started is found there, as on the
/// node. `pid` None: the calling monitor itself.
pub fn node_root(pid: Option<u32>, path: &Path) -> PathBuf {
    let who = pid.map_or_else(|| "self".to_string(), |p| p.to_string());
    let mut p = PathBuf::from(format!("/proc/{who}/fd/{NODE_ROOT_FD}"));
    p.push(path.strip_prefix("/").unwrap_or(path));
    p
}

/// `path` as the node names it, for the calling monitor: through its hold
/// on the node's root when it has a mount namespace of its own.
pub fn node_path(path: &Path) -> PathBuf {
    if std::env::var_os(MOUNT_NS_ENV).is_some() {
        node_root(None, path)
    } else {
        path.to_path_buf()
    }
}

/// Starts `husk shim --dir DIR` from `exe` (the sealed handle of
/// `sealed.rs`, or a plain path); returns once the monitor is listening.
/// argv[0] is the path of the binary this process runs, whatever `exe`.
pub fn spawn(exe: &Path, dir: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    crate::metrics::get().shim_starts.inc();
    let arg0 = std::env::current_exe().unwrap_or_else(|_| exe.to_path_buf());
    let mut cmd = Command::new(exe);
    let own = OWN_MOUNT_NS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    if let Some(dirs) = own {
        cmd.env(MOUNT_NS_ENV, dirs);
    } else {
        cmd.env_remove(MOUNT_NS_ENV);
    }
    let out = cmd
        .arg0(arg0)
        .arg("shim")
        .arg("--dir")
        .arg(dir)
        .env(
            crate::cgroup::LAYOUT_ENV,
            crate::cgroup::Layout::host().encode(),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "husk shim failed to start: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// Starts a shim for `dir` unless one is running there. Serialized, so
/// concurrent callers (removals and failed creates of one pod's
/// containers after its shim was killed) start one shim, not several.
pub fn ensure(exe: &Path, dir: &Path) -> io::Result<()> {
    static RESPAWN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _g = RESPAWN.lock().unwrap_or_else(|p| p.into_inner());
    if pid(dir).is_some() {
        return Ok(());
    }
    spawn(exe, dir)
}

/// One request to the shim whose state dir is `dir` (traced when the
/// caller is: `spans.rs`).
pub fn call(dir: &Path, req: &ShimRequest, timeout: Duration) -> io::Result<ShimResponse> {
    match super::spans::begin(req, dir) {
        None => call_untraced(dir, req, timeout),
        Some((span, traced)) => {
            let r = call_untraced(dir, &traced, timeout);
            super::spans::end(span, &r);
            r
        }
    }
}

fn call_untraced(dir: &Path, req: &ShimRequest, timeout: Duration) -> io::Result<ShimResponse> {
    let addr = std::fs::read_to_string(dir.join("address"))?;
    // A dead shim's socket can still accept connections (see below), so
    // liveness is checked first, by its pid file (written before the
    // address).
    let Some(shim) = pid(dir) else {
        return Err(io::Error::new(
            io::ErrorKind::NotConnected,
            "the shim is not running",
        ));
    };
    let mut s = UnixStream::connect(addr.trim())?;
    s.set_write_timeout(Some(timeout))?;
    write_msg(&mut s, req)?;
    // The answer is awaited while that shim lives: a killed shim's sockets
    // (the listener and this connection) may stay open in a process it
    // forked (a created init holds every fd until it execs), so the end of
    // file may never come. Reads wait a little at a time, and between
    // them the shim's liveness and the deadline are checked.
    let deadline = std::time::Instant::now() + timeout;
    s.set_read_timeout(Some(SHIM_ALIVE_CHECK))?;
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        if buf.len() >= 4 {
            let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
            if buf.len() >= 4 + len || len > super::wire::MAX_FRAME {
                return read_msg(&mut buf.as_slice());
            }
        }
        match io::Read::read(&mut s, &mut chunk) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the shim closed the connection without an answer",
                ))
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                // Gone, or replaced by a fresh shim (this connection may
                // then sit in the dead one's backlog).
                if pid(dir) != Some(shim) {
                    return Err(io::Error::new(
                        io::ErrorKind::BrokenPipe,
                        "the shim died before it answered",
                    ));
                }
                if std::time::Instant::now() >= deadline {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("no answer from the shim in {timeout:?}"),
                    ));
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// How often a pending call checks that its shim is still alive.
const SHIM_ALIVE_CHECK: Duration = Duration::from_millis(100);

/// The monitor's pid, if its pid file names a live (not zombie) process.
///
/// The lists ask this of every pod each time (the kubelet lists every
/// second), so the pid a file named is kept, and a kept pid still alive
/// is the answer: the file is written once by its monitor, and a new
/// monitor for the dir is started only once the old one is gone. Alive is
/// asked of a pidfd (one exited, zombie or not, polls readable), not of
/// `/proc/PID/stat`, whose path walk and formatting cost ten times more.
pub fn pid(dir: &Path) -> Option<i32> {
    static KNOWN: std::sync::Mutex<Option<std::collections::HashMap<std::path::PathBuf, i32>>> =
        std::sync::Mutex::new(None);
    let kept = KNOWN
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .and_then(|m| m.get(dir).copied());
    if let Some(p) = kept.filter(|&p| alive(p)) {
        return Some(p);
    }
    let read = std::fs::read_to_string(dir.join("shim.pid"))
        .ok()
        .and_then(|t| t.trim().parse::<i32>().ok())
        .filter(|&p| alive(p));
    let mut known = KNOWN.lock().unwrap_or_else(|p| p.into_inner());
    let m = known.get_or_insert_with(Default::default);
    match read {
        Some(p) => m.insert(dir.to_path_buf(), p),
        None => m.remove(dir),
    };
    read
}

/// Whether `pid` is a process that has not exited (a zombie has).
fn alive(pid: i32) -> bool {
    let Some(p) = rustix::process::Pid::from_raw(pid) else {
        return false;
    };
    match rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()) {
        Ok(fd) => {
            let mut fds = [rustix::event::PollFd::new(
                &fd,
                rustix::event::PollFlags::IN,
            )];
            // Readable: the process has exited.
            !matches!(rustix::event::poll(&mut fds, Some(&rustix::event::Timespec::default())), Ok(n) if n > 0)
        }
        Err(rustix::io::Errno::SRCH) => false,
        // No pidfds (before 5.3) or none left: the process's state.
        Err(_) => std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| {
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().next())
                    .map(|state| state != "Z" && state != "X")
            })
            .unwrap_or(false),
    }
}

/// SIGKILLs every `husk shim --dir DIR` process, pid file or not (one
/// that a killed server was still starting has none yet); returns how many.
pub fn kill_strays(dir: &Path) -> usize {
    let want = dir.as_os_str().as_encoded_bytes();
    let mut n = 0;
    for ent in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = ent.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(ent.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let is_shim = args
            .windows(3)
            .any(|w| w[0] == b"shim" && w[1] == b"--dir" && w[2] == want);
        if is_shim {
            if let Some(p) = rustix::process::Pid::from_raw(pid) {
                if rustix::process::kill_process(p, rustix::process::Signal::KILL).is_ok() {
                    n += 1;
                }
            }
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alive_is_false_for_a_zombie_and_for_no_process() {
        assert!(alive(std::process::id() as i32));
        let mut child = Command::new("true").spawn().expect("spawn");
        let pid = child.id() as i32;
        // Exited and not yet reaped: a zombie.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while alive(pid) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(!alive(pid), "a zombie is not alive");
        child.wait().expect("reap");
        assert!(!alive(pid), "a reaped pid is not alive");
        assert!(!alive(0));
    }

    #[test]
    fn a_monitor_pid_is_kept_while_it_lives_and_read_again_after() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(pid(dir.path()), None, "no pid file");
        let me = std::process::id() as i32;
        std::fs::write(dir.path().join("shim.pid"), format!("{me}\n")).expect("write");
        assert_eq!(pid(dir.path()), Some(me));
        // Kept: the file is not read again while the process lives.
        std::fs::write(dir.path().join("shim.pid"), "garbage").expect("write");
        assert_eq!(pid(dir.path()), Some(me));
        // A monitor that exited is noticed, and the file read again.
        let mut child = Command::new("true").spawn().expect("spawn");
        let gone = child.id() as i32;
        child.wait().expect("reap");
        let other = tempfile::tempdir().expect("tempdir");
        std::fs::write(other.path().join("shim.pid"), gone.to_string()).expect("write");
        assert_eq!(pid(other.path()), None);
    }
}
