//! Execs in a container an OCI runtime runs: the container's own process
//! with the command swapped in, written as a process.json and started by
//! `exec --detach --process`; the new process comes to the shim as its
//! subreaper, like an init. ExecSync collects its output (`exec.rs`); a
//! streaming exec hands its descriptors, or its terminal's master, to the
//! server (`stream.rs`).

use super::exec_parts::exec_process;
use super::oci::{Oci, Stdio3};
use super::runtime_call::{with_stderr, Failure};
use crate::api::shim::{ExecRequest, StreamExecRequest, StreamFds};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

fn internal(e: impl std::fmt::Display) -> Failure {
    (13, e.to_string())
}

fn null() -> Result<OwnedFd, Failure> {
    std::fs::File::open("/dev/null")
        .map(OwnedFd::from)
        .map_err(internal)
}

/// Writes the exec's process.json; its path.
fn process_file(o: &Oci, dir: &Path, args: &[String], tty: bool) -> Result<PathBuf, Failure> {
    if args.is_empty() {
        return Err((3, "exec needs a command".into()));
    }
    let file = dir.join(format!("exec-{:016x}.json", rand::random::<u64>()));
    let (_, process) = exec_process(&o.bundle, args, tty).map_err(internal)?;
    crate::store::atomic::write_state_json(&file, &process).map_err(internal)?;
    Ok(file)
}

fn pid_file(dir: &Path) -> PathBuf {
    dir.join("oci")
        .join(format!("exec-{:016x}.pid", rand::random::<u64>()))
}

/// ExecSync's start: the pid, its stdout and stderr read ends
/// (non-blocking), and its process file.
pub(super) fn sync(
    o: &Oci,
    dir: &Path,
    req: &ExecRequest,
) -> Result<(i32, [OwnedFd; 2], PathBuf), Failure> {
    let file = process_file(o, dir, &req.args, false)?;
    let (out_r, out_w) = super::exec_parts::output_pipe().map_err(internal)?;
    let (err_r, err_w) = super::exec_parts::output_pipe().map_err(internal)?;
    let io = Stdio3 {
        stdin: null()?,
        stdout: out_w,
        stderr: err_w,
    };
    match o.exec(&req.id, &file, &pid_file(dir), None, io) {
        Ok(pid) => Ok((pid, [out_r, err_r], file)),
        Err(e) => {
            let _ = std::fs::remove_file(&file);
            Err(with_stderr(e, Some(&err_r)))
        }
    }
}

/// A streaming exec's start: the pid, the server's ends (stdin writer,
/// stdout and stderr readers, or the terminal's master), and which came.
pub(super) fn stream(
    o: &Oci,
    dir: &Path,
    req: &StreamExecRequest,
) -> Result<(i32, Vec<OwnedFd>, StreamFds), Failure> {
    let file = process_file(o, dir, &req.args, req.tty)?;
    let mut mine = Vec::new();
    let mut which = StreamFds::default();
    // What the runtime itself says on a failure comes on this pipe (for a
    // terminal, the process's stdio is the terminal, not the runtime's).
    let (said_r, said_w) = super::exec_parts::output_pipe().map_err(internal)?;
    let mut console = None;
    let io = if req.tty {
        let (l, p) = super::console::console_listener(dir).map_err(internal)?;
        console = Some((l, p));
        Stdio3 {
            stdin: null()?,
            stdout: null()?,
            stderr: said_w,
        }
    } else {
        let stdin = if req.stdin {
            let (r, w) = super::exec_parts::pipe().map_err(internal)?;
            mine.push(w);
            which.stdin = true;
            r
        } else {
            null()?
        };
        let stdout = if req.stdout {
            let (r, w) = super::exec_parts::pipe().map_err(internal)?;
            mine.push(r);
            which.stdout = true;
            w
        } else {
            null()?
        };
        // Without a stderr of its own, the process's goes nowhere but the
        // runtime's words still come to the shim.
        let stderr = if req.stderr {
            let (r, w) = super::exec_parts::pipe().map_err(internal)?;
            mine.push(r);
            which.stderr = true;
            drop(said_w);
            w
        } else {
            said_w
        };
        Stdio3 {
            stdin,
            stdout,
            stderr,
        }
    };
    let console_path = console.as_ref().map(|(_, p)| p.clone());
    let r = o.exec(&req.id, &file, &pid_file(dir), console_path.as_deref(), io);
    let _ = std::fs::remove_file(&file);
    let pid = match r {
        Ok(pid) => pid,
        Err(e) => {
            if let Some((_, p)) = &console {
                let _ = std::fs::remove_file(p);
            }
            // Its words are on the process's stderr when it has one.
            let said = if which.stderr {
                mine.pop()
            } else {
                Some(said_r)
            };
            if let Some(fd) = &said {
                let _ = rustix::io::ioctl_fionbio(fd, true);
            }
            return Err(with_stderr(e, said.as_ref()));
        }
    };
    if let Some((l, p)) = console {
        super::console::take_master(&l, &p, pid, &mut mine, &mut which).map_err(internal)?;
    }
    Ok((pid, mine, which))
}
