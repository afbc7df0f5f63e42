//! Execs in a shim v2 runtime's container: ExecSync and streaming, each
//! an Exec then a Start in its shim, stdio through FIFOs, the exit told
//! by the shim's events; killed and deleted through the shim.

use super::client::CallError;
use super::fifo::{both_ways, reader};
use super::{any, call_failure, internal, INTERNAL};
use crate::api::containerd::{
    DeleteRequest, DeleteResponse, ExecProcessRequest, KillRequest, StartRequest, StartResponse,
};
use crate::api::shim::{ExecRequest, StreamExecRequest, StreamFds};
use crate::shim::exec::PendingExec;
use crate::shim::monitor::Shim;
use crate::shim::runtime_call::Failure;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;

/// Which stdio an exec gets.
struct Wanted {
    stdin: bool,
    stdout: bool,
    stderr: bool,
    /// A terminal (the runtime's; its output comes on stdout).
    tty: bool,
}

impl Shim {
    /// Execs `args` in `id` through its shim (FIFOs under `io`): its pid,
    /// and the monitor's ends in the order stdin, stdout, stderr (those
    /// wanted).
    fn v2_start_exec(
        &mut self,
        id: &str,
        exec_id: &str,
        args: &[String],
        io: &std::path::Path,
        want: Wanted,
    ) -> Result<(i32, Vec<OwnedFd>), Failure> {
        if args.is_empty() {
            return Err((3, "exec needs a command".into()));
        }
        let bundle = self
            .v2
            .tasks
            .get(id)
            .map(|t| t.bundle.clone())
            .unwrap_or_default();
        let (_, process) = crate::shim::exec_parts::exec_process(&bundle, args, want.tty)
            .map_err(|e| (INTERNAL, e))?;
        std::fs::create_dir_all(io).map_err(internal("create the FIFO dir"))?;
        let mut ends = Vec::new();
        let path = |name: &str, on: bool, ends: &mut Vec<OwnedFd>| -> Result<String, Failure> {
            if !on {
                return Ok(String::new());
            }
            let p = io.join(name);
            ends.push(if name == "stdin" {
                both_ways(&p)?
            } else {
                reader(&p)?
            });
            Ok(p.display().to_string())
        };
        let stdin = path("stdin", want.stdin, &mut ends)?;
        let stdout = path("stdout", want.stdout, &mut ends)?;
        let stderr = path("stderr", want.stderr && !want.tty, &mut ends)?;
        let spec = serde_json::to_vec(&process).map_err(|e| (INTERNAL, e.to_string()))?;
        let what = format!("exec in {id}");
        self.v2_call::<_, ()>(
            id,
            "Exec",
            &ExecProcessRequest {
                id: id.to_string(),
                exec_id: exec_id.to_string(),
                terminal: want.tty,
                stdin,
                stdout,
                stderr,
                spec: Some(any(
                    "types.containerd.io/opencontainers/runtime-spec/1/Process",
                    spec,
                )),
            },
        )
        .map_err(|e| call_failure(&what, e))?;
        self.v2
            .execs
            .insert(exec_id.to_string(), (id.to_string(), io.to_path_buf()));
        let started: StartResponse = self
            .v2_call(
                id,
                "Start",
                &StartRequest {
                    id: id.to_string(),
                    exec_id: exec_id.to_string(),
                },
            )
            .map_err(|e| call_failure(&what, e))?;
        Ok((started.pid as i32, ends))
    }

    fn exec_dir(&self, id: &str, exec_id: &str) -> std::path::PathBuf {
        self.dir.join("v2io").join(format!("{id}.{exec_id}"))
    }

    /// ExecSync in a container of a shim: its Exec, then Start; the answer
    /// comes with the exit the shim tells.
    pub(in crate::shim) fn v2_exec(
        &mut self,
        req: &ExecRequest,
        conn: UnixStream,
    ) -> Result<PendingExec, (Failure, UnixStream)> {
        let exec_id = format!("exec-{:016x}", rand::random::<u64>());
        let io = self.exec_dir(&req.id, &exec_id);
        let want = Wanted {
            stdin: false,
            stdout: true,
            stderr: true,
            tty: false,
        };
        match self.v2_start_exec(&req.id, &exec_id, &req.args, &io, want) {
            Ok((_, ends)) => {
                let mut ends = ends.into_iter();
                match (ends.next(), ends.next()) {
                    (Some(out), Some(err)) => {
                        Ok(PendingExec::new_v2(conn, req, exec_id, [out, err]))
                    }
                    _ => Err(((INTERNAL, "exec: no output FIFOs".into()), conn)),
                }
            }
            Err(f) => {
                self.v2_forget_exec(&exec_id);
                let _ = std::fs::remove_dir_all(&io);
                Err((f, conn))
            }
        }
    }

    /// A streaming exec in a container of a shim: the server gets the
    /// FIFOs' ends; the exit follows when the shim tells it.
    pub(in crate::shim) fn v2_stream_exec(&mut self, req: &StreamExecRequest, conn: UnixStream) {
        let exec_id = format!("exec-{:016x}", rand::random::<u64>());
        let io = self.exec_dir(&req.id, &exec_id);
        let want = Wanted {
            stdin: req.stdin,
            // A terminal's output is read whether or not it is shown.
            stdout: req.stdout || req.tty,
            stderr: req.stderr && !req.tty,
            tty: req.tty,
        };
        let started = self.v2_start_exec(&req.id, &exec_id, &req.args, &io, want);
        let started = match started {
            Ok((pid, ends)) => Ok((
                pid,
                ends,
                StreamFds {
                    pid,
                    stdin: req.stdin,
                    stdout: req.stdout || req.tty,
                    stderr: req.stderr && !req.tty,
                    pty: false,
                    exec_id: exec_id.clone(),
                },
            )),
            Err(f) => {
                self.v2_forget_exec(&exec_id);
                let _ = std::fs::remove_dir_all(&io);
                Err(f)
            }
        };
        let ok = started.is_ok();
        self.streams
            .exec_started(started, conn, Some(exec_id.clone()));
        // The server never got its ends: the exec is not left running.
        if ok && !self.streams.has_exec(&exec_id) {
            self.v2_kill_exec(&exec_id);
        }
    }

    /// Kills an exec whose time ran out; its exit comes as for any.
    pub(in crate::shim) fn v2_kill_exec(&mut self, exec_id: &str) {
        let Some((id, _)) = self.v2.execs.get(exec_id).cloned() else {
            return;
        };
        let _: Result<(), CallError> = self.v2_call(
            &id,
            "Kill",
            &KillRequest {
                id: id.clone(),
                exec_id: exec_id.to_string(),
                signal: libc::SIGKILL as u32,
                all: false,
            },
        );
    }

    /// Deletes an exec in its shim, and its FIFOs.
    pub(super) fn v2_forget_exec(&mut self, exec_id: &str) {
        let Some((id, io)) = self.v2.execs.remove(exec_id) else {
            return;
        };
        let _: Result<DeleteResponse, CallError> = self.v2_call(
            &id,
            "Delete",
            &DeleteRequest {
                id: id.clone(),
                exec_id: exec_id.to_string(),
            },
        );
        let _ = std::fs::remove_dir_all(io);
    }
}
