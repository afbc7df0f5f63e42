//! ExecSync inside the shim: a command run in a container through
//! libcontainer's tenant builder, its output collected (bounded) while the
//! single-threaded loop goes on serving; the answer is written on the
//! request's connection when the process has exited and its pipes are
//! drained, or when the timeout kills it.

use super::exec_parts::{
    notify_sockets, output_pipe, remove_new_notify_sockets, sweep_notify_sockets,
};
use super::oci::Oci;
use super::runtime_call::Failure;
use super::wire::{write_msg, DEFAULT_MAX_OUTPUT};
use crate::api::shim::{ExecRequest, ExecResult, ShimResponse};
use libcontainer::container::builder::ContainerBuilder;
use libcontainer::container::Container;
use libcontainer::syscall::syscall::SyscallType;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long output may still arrive after the process exited (its
/// background children may hold the pipes open).
const DRAIN_GRACE: Duration = Duration::from_millis(250);

pub struct PendingExec {
    conn: UnixStream,
    pub pid: i32,
    /// stdout, stderr read ends (None once at EOF).
    pub pipes: [Option<OwnedFd>; 2],
    bufs: [Vec<u8>; 2],
    truncated: [bool; 2],
    max: usize,
    exit: Option<(i32, Instant)>,
    deadline: Option<Instant>,
    timed_out: bool,
    process_file: PathBuf,
    /// A shim v2 runtime's exec id (its exit comes as an event; `pid` is
    /// then 0).
    pub exec_id: Option<String>,
}

/// Starts `req` in container `req.id`; the caller keeps the pending exec.
pub fn start(
    youki: &Path,
    dir: &Path,
    req: &ExecRequest,
    conn: UnixStream,
    oci: Option<Oci>,
) -> Result<PendingExec, (Failure, UnixStream)> {
    if let Some(o) = oci {
        return match super::oci_exec::sync(&o, dir, req) {
            Ok((pid, pipes, file)) => Ok(PendingExec::new(conn, req, pid, pipes, file)),
            Err(e) => Err((e, conn)),
        };
    }
    let r = (|| -> Result<(i32, [OwnedFd; 2], PathBuf), String> {
        if req.args.is_empty() {
            return Err("exec needs a command".into());
        }
        sweep_notify_sockets(&youki.join(&req.id));
        let file = dir.join(format!("exec-{:016x}.json", rand::random::<u64>()));
        let (out_r, out_w) = output_pipe()?;
        let (err_r, err_w) = output_pipe()?;
        let stdin = std::fs::File::open("/dev/null").map_err(|e| e.to_string())?;
        let sockets = notify_sockets(&youki.join(&req.id));
        let pid = super::fork::in_child(|| {
            let executor = write_process(youki, &req.id, &req.args, &file)?;
            ContainerBuilder::new(req.id.clone(), SyscallType::default())
                .with_root_path(youki)
                .map_err(|e| e.to_string())?
                .with_executor(executor)
                .with_stdin(OwnedFd::from(stdin))
                .with_stdout(out_w)
                .with_stderr(err_w)
                .as_tenant()
                .with_process(Some(&file))
                .with_detach(true)
                .build()
                .map(|pid| pid.as_raw())
                .map_err(|e| format!("exec in {}: {e:#}", req.id))
        })
        .inspect_err(|_| {
            let _ = std::fs::remove_file(&file);
        })?;
        remove_new_notify_sockets(&youki.join(&req.id), &sockets);
        Ok((pid, [out_r, err_r], file))
    })();
    match r {
        Ok((pid, pipes, file)) => Ok(PendingExec::new(conn, req, pid, pipes, file)),
        Err(e) => Err((
            super::lookpath::failure(&format!("exec in {}", req.id), e),
            conn,
        )),
    }
}

/// Writes the container's own process with the command swapped in (user,
/// env, cwd, capabilities and rlimits as the container has them) to `file`;
/// returns the executor that applies the container's seccomp filter.
fn write_process(
    youki: &Path,
    id: &str,
    args: &[String],
    file: &Path,
) -> Result<super::tenant::TenantExecutor, String> {
    let c = Container::load(youki.join(id)).map_err(|e| format!("container {id}: {e}"))?;
    let (spec, mut process) = super::exec_parts::exec_process(c.bundle(), args, false)?;
    let executor = super::tenant::TenantExecutor::prepare(&spec, &mut process)?;
    crate::store::atomic::write_state_json(file, &process).map_err(|e| e.to_string())?;
    Ok(executor)
}

impl PendingExec {
    fn new(
        conn: UnixStream,
        req: &ExecRequest,
        pid: i32,
        [out, err]: [OwnedFd; 2],
        file: PathBuf,
    ) -> PendingExec {
        PendingExec {
            conn,
            pid,
            pipes: [Some(out), Some(err)],
            bufs: [Vec::new(), Vec::new()],
            truncated: [false, false],
            max: if req.max_output == 0 {
                DEFAULT_MAX_OUTPUT
            } else {
                req.max_output as usize
            },
            exit: None,
            deadline: (req.timeout_ms > 0)
                .then(|| Instant::now() + Duration::from_millis(req.timeout_ms as u64)),
            timed_out: false,
            process_file: file,
            exec_id: None,
        }
    }

    /// An exec a shim v2 runtime runs, reading its FIFOs.
    pub fn new_v2(
        conn: UnixStream,
        req: &ExecRequest,
        exec_id: String,
        pipes: [OwnedFd; 2],
    ) -> PendingExec {
        let mut x = PendingExec::new(conn, req, 0, pipes, PathBuf::new());
        x.exec_id = Some(exec_id);
        x
    }

    /// Whether its time ran out and it is not yet killed.
    pub fn deadline_passed(&self, now: Instant) -> bool {
        self.exit.is_none() && !self.timed_out && self.deadline.is_some_and(|d| now >= d)
    }

    /// Reads what the pipes hold (keeping at most `max` bytes per stream).
    pub fn drain(&mut self) {
        let mut buf = vec![0u8; 64 * 1024];
        for i in 0..2 {
            while let Some(fd) = &self.pipes[i] {
                match rustix::io::read(fd, &mut buf) {
                    Ok(0) => self.pipes[i] = None,
                    Ok(n) => {
                        let room = self.max.saturating_sub(self.bufs[i].len());
                        if n > room {
                            self.truncated[i] = true;
                        }
                        self.bufs[i].extend_from_slice(&buf[..n.min(room)]);
                    }
                    Err(rustix::io::Errno::INTR) => {}
                    Err(_) => break,
                }
            }
        }
    }

    pub fn exited(&mut self, code: i32) {
        self.exit = Some((code, Instant::now()));
    }

    /// When the loop must wake for this exec at the latest.
    pub fn wake_at(&self) -> Option<Instant> {
        match self.exit {
            Some((_, at)) => Some(at + DRAIN_GRACE),
            None if !self.timed_out => self.deadline,
            None => None,
        }
    }

    /// Answers if done (or kills it on timeout); true once answered.
    pub fn poll(&mut self, now: Instant) -> bool {
        if self.deadline_passed(now) {
            // A shim's exec (pid 0) is killed through its shim.
            if self.pid > 0 {
                // SAFETY: kill(2) on the exec'd process and its group.
                unsafe {
                    libc::kill(-self.pid, libc::SIGKILL);
                    libc::kill(self.pid, libc::SIGKILL);
                }
            }
            self.timed_out = true;
            self.drain();
            return self.answer(-1);
        }
        match self.exit {
            Some((code, at))
                if self.pipes.iter().all(Option::is_none) || now >= at + DRAIN_GRACE =>
            {
                self.drain();
                self.answer(code)
            }
            _ => false,
        }
    }

    fn answer(&mut self, code: i32) -> bool {
        let resp = ShimResponse {
            exec: Some(ExecResult {
                stdout: std::mem::take(&mut self.bufs[0]),
                stderr: std::mem::take(&mut self.bufs[1]),
                exit_code: code,
                timed_out: self.timed_out,
                stdout_truncated: self.truncated[0],
                stderr_truncated: self.truncated[1],
            }),
            ..Default::default()
        };
        let _ = write_msg(&mut self.conn, &resp);
        if self.exec_id.is_none() {
            let _ = std::fs::remove_file(&self.process_file);
        }
        true
    }
}
