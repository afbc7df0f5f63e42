//! The server's side of the shim API: starting a shim and calling it.
//! Blocking std I/O; async callers wrap calls in `spawn_blocking`.

use super::wire::{read_msg, write_msg};
use crate::api::shim::{ShimRequest, ShimResponse};
use std::io;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Starts `husk shim --dir DIR`; returns once the monitor is listening.
pub fn spawn(exe: &Path, dir: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let out = Command::new(exe)
        .arg("shim")
        .arg("--dir")
        .arg(dir)
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

/// One request to the shim whose state dir is `dir`.
pub fn call(dir: &Path, req: &ShimRequest, timeout: Duration) -> io::Result<ShimResponse> {
    let addr = std::fs::read_to_string(dir.join("address"))?;
    let mut s = UnixStream::connect(addr.trim())?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    write_msg(&mut s, req)?;
    read_msg(&mut s)
}

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
        let Some(pid) = ent
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
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
