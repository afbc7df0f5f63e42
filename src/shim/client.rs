//! The server's side of the shim API: starting a shim and calling it.
//! Blocking std I/O; async callers wrap calls in `spawn_blocking`.

use super::wire::{read_msg, write_msg};
use crate::api::shim::{ShimRequest, ShimResponse};
use std::io;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Starts `husk shim --dir DIR` from `exe` (the sealed handle of
/// `sealed.rs`, or a plain path); returns once the monitor is listening.
/// argv[0] is the path of the binary this process runs, whatever `exe`.
pub fn spawn(exe: &Path, dir: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    crate::metrics::get().shim_starts.inc();
    let arg0 = std::env::current_exe().unwrap_or_else(|_| exe.to_path_buf());
    let out = Command::new(exe)
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
pub fn pid(dir: &Path) -> Option<i32> {
    let pid: i32 = std::fs::read_to_string(dir.join("shim.pid"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())?;
    (state != "Z" && state != "X").then_some(pid)
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
