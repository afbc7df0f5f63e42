//! The shim's single-threaded loop: accept one request at a time on the
//! API socket, and reap children whenever SIGCHLD arrives (a self-pipe
//! written by the signal handler wakes `poll`).

use super::oci::{Oci, Stdio3};
use super::runtime_call::{Failure, Made};
use super::wire::{read_msg, write_msg};
use super::ExitRecord;
use crate::api::shim::{
    shim_request::Request, ContainerState, CreateRequest, ShimRequest, ShimResponse,
};
use crate::logs::{CriLogWriter, Stream, DEFAULT_MAX_LINE};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Status {
    Created,
    Running,
    Stopped,
}

pub(super) struct Entry {
    pub(super) pid: i32,
    pub(super) status: Status,
    pub(super) exit: Option<ExitRecord>,
}

pub(super) struct Shim {
    pub(super) dir: PathBuf,
    pub(super) youki: PathBuf,
    pub(super) containers: HashMap<String, Entry>,
    pub(super) shutdown: bool,
    /// CRI log writers by container.
    pub(super) logs: HashMap<String, CriLogWriter>,
    /// Read ends of containers' stdout/stderr pipes.
    pub(super) pipes: Vec<(OwnedFd, String, Stream)>,
    /// ExecSync requests in flight.
    pub(super) execs: Vec<super::exec::PendingExec>,
    /// Streaming exec/attach state (stream.rs).
    pub(super) streams: super::stream::Streams,
    /// OOM kills of running containers (oom.rs).
    pub(super) oom: super::oom::OomWatch,
    /// The containers an OCI runtime runs (runtime.rs), by id.
    pub(super) oci: HashMap<String, Oci>,
    /// The containers shim v2 runtimes run (v2/).
    pub(super) v2: super::v2::State,
}

pub(super) fn reply_err(code: i32, e: impl std::fmt::Display) -> ShimResponse {
    ShimResponse {
        error: e.to_string(),
        code,
        ..Default::default()
    }
}

const NOT_FOUND: i32 = 5;
const INVALID: i32 = 3;
const FAILED_PRECONDITION: i32 = 9;
const INTERNAL: i32 = 13;

fn open_out(path: &str) -> io::Result<File> {
    if path.is_empty() {
        OpenOptions::new().write(true).open("/dev/null")
    } else {
        OpenOptions::new().create(true).append(true).open(path)
    }
}

/// Whether `pid` is the init (pid 1) of the innermost PID namespace it is in.
fn pid_namespace_init(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("NSpid:"))
                .and_then(|ids| ids.split_whitespace().last().map(|l| l == "1"))
        })
        .unwrap_or(false)
}

impl Shim {
    fn state_of(&self, id: &str) -> Option<ContainerState> {
        let e = self.containers.get(id)?;
        Some(ContainerState {
            id: id.to_string(),
            status: match e.status {
                Status::Created => "created",
                Status::Running => "running",
                Status::Stopped => "stopped",
            }
            .into(),
            pid: e.pid,
            exit_code: e.exit.as_ref().map(|x| x.exit_code).unwrap_or(0),
            exited_at: e.exit.as_ref().map(|x| x.exited_at).unwrap_or(0),
            oom_kills: e.exit.as_ref().map(|x| x.oom_kills).unwrap_or(0),
        })
    }

    pub(super) fn ok(&self, id: &str) -> ShimResponse {
        ShimResponse {
            state: self.state_of(id),
            ..Default::default()
        }
    }

    fn handle(&mut self, req: ShimRequest) -> ShimResponse {
        match req.request {
            Some(Request::Create(c)) if c.start => {
                let made = self.create(&c);
                if !made.error.is_empty() {
                    return made;
                }
                let started = self.start(&c.id);
                ShimResponse {
                    runtime_us: made.runtime_us + started.runtime_us,
                    ..started
                }
            }
            Some(Request::Create(c)) => self.create(&c),
            Some(Request::ReopenLog(r)) if !self.logs.contains_key(&r.id) => reply_err(
                NOT_FOUND,
                format!("container {} has no log in this shim", r.id),
            ),
            // What the container wrote before the reopen belongs to the
            // old file: the pipes are drained into it first.
            Some(Request::ReopenLog(r)) => match self.drain_then_reopen(&r.id) {
                Ok(()) => self.ok(&r.id),
                Err(e) => reply_err(INTERNAL, format!("reopen log of {}: {e}", r.id)),
            },
            Some(Request::Start(s)) => self.start(&s.id),
            Some(Request::Update(u)) if self.v2.has(&u.id) => self.v2_update(&u),
            Some(Request::Stats(s)) if self.v2.has(&s.id) => self.v2_stats(&s.id),
            Some(Request::Resize(r)) if self.v2.has(&r.id) => self.v2_resize(&r),
            Some(Request::CloseStdin(c)) if self.v2.has(&c.id) => {
                self.v2_close_stdin(&c.id, &c.exec_id)
            }
            Some(Request::Resize(r)) => reply_err(
                12,
                format!("container {}: resize its terminal's master", r.id),
            ),
            Some(Request::CloseStdin(c)) => {
                reply_err(12, format!("container {}: close its stdin's writer", c.id))
            }
            Some(Request::Update(u)) => reply_err(
                12,
                format!(
                    "container {}: its runtime takes no updates (the server writes its cgroup)",
                    u.id
                ),
            ),
            Some(Request::Stats(s)) => reply_err(
                12,
                format!(
                    "container {}: its runtime reports no stats (the server reads its cgroup)",
                    s.id
                ),
            ),
            Some(Request::Kill(k)) => self.kill(&k.id, k.signal, k.all),
            Some(Request::Delete(d)) => self.delete(&d.id, d.force),
            Some(Request::State(s)) => match self.state_of(&s.id) {
                Some(_) => self.ok(&s.id),
                None => reply_err(
                    NOT_FOUND,
                    format!("container {} not found in this shim", s.id),
                ),
            },
            Some(Request::Shutdown(r)) => {
                if r.delete_stopped {
                    let stopped: Vec<String> = self
                        .containers
                        .iter()
                        .filter(|(_, e)| e.status == Status::Stopped)
                        .map(|(id, _)| id.clone())
                        .collect();
                    for id in stopped {
                        self.delete(&id, false);
                    }
                }
                if self.containers.is_empty() {
                    self.shutdown = true;
                    self.ok("")
                } else {
                    let ids: Vec<&String> = self.containers.keys().collect();
                    reply_err(FAILED_PRECONDITION, format!("containers remain: {ids:?}"))
                }
            }
            // Served asynchronously by serve_one; never reaches here.
            Some(Request::Exec(x)) => {
                reply_err(INTERNAL, format!("exec in {} was not started", x.id))
            }
            Some(Request::StreamExec(x)) => {
                reply_err(INTERNAL, format!("exec in {} was not started", x.id))
            }
            Some(Request::Attach(a)) => reply_err(INTERNAL, format!("attach to {} failed", a.id)),
            None => reply_err(INVALID, "empty request"),
        }
    }

    /// Takes `dir` as this shim's state dir: the server renamed the dir
    /// it was started in (ahead of its pod) to it.
    fn create(&mut self, req: &CreateRequest) -> ShimResponse {
        let id = req.id.as_str();
        let bundle = Path::new(&req.bundle);
        let (stdout, stderr) = (req.stdout_path.as_str(), req.stderr_path.as_str());
        if self.containers.contains_key(id) {
            return reply_err(INVALID, format!("container {id} already exists"));
        }
        if req.oci.as_ref().is_some_and(|o| o.shim.is_some()) {
            return self.v2_create(req);
        }
        let mut readers: Vec<(OwnedFd, Stream)> = Vec::new();
        let mut runtime = Duration::ZERO;
        let mut cio = match self.streams.prepare_create(&self.dir, req) {
            Ok(c) => c,
            Err(e) => return reply_err(INTERNAL, e),
        };
        let built = (|| -> Result<i32, Failure> {
            let stdin = cio.take_stdin().map_err(|e| (INTERNAL, e))?;
            // Output goes through the shim when it is logged, and when an
            // attacher may read it (a stdin container, as critest attaches
            // to, need not have a log).
            // An OCI runtime's create says why it failed on the process's
            // stderr: that goes through the shim too.
            let (out, err): (OwnedFd, OwnedFd) =
                if req.log_path.is_empty() && !req.stdin && req.oci.is_none() {
                    (
                        open_out(stdout)
                            .map_err(|e| (INTERNAL, format!("open {stdout}: {e}")))?
                            .into(),
                        open_out(stderr)
                            .map_err(|e| (INTERNAL, format!("open {stderr}: {e}")))?
                            .into(),
                    )
                } else {
                    let max = match req.max_log_line {
                        0 => DEFAULT_MAX_LINE,
                        n => n as usize,
                    };
                    if !req.log_path.is_empty() {
                        let at = super::client::node_path(Path::new(&req.log_path));
                        let w = CriLogWriter::open(&at, max)
                            .map_err(|e| (INTERNAL, format!("open log {}: {e}", req.log_path)))?;
                        self.logs.insert(id.to_string(), w);
                    }
                    let mut ends = Vec::new();
                    for stream in [Stream::Stdout, Stream::Stderr] {
                        let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
                            .map_err(|e| (INTERNAL, format!("pipe: {e}")))?;
                        rustix::io::ioctl_fionbio(&r, true)
                            .map_err(|e| (INTERNAL, format!("pipe: {e}")))?;
                        readers.push((r, stream));
                        ends.push(w);
                    }
                    let (Some(err), Some(out)) = (ends.pop(), ends.pop()) else {
                        return Err((INTERNAL, "pipe".into()));
                    };
                    (out, err)
                };
            let console = cio.console_socket();
            let stderr_reader = readers
                .iter()
                .find(|(_, s)| *s == Stream::Stderr)
                .map(|(fd, _)| fd.try_clone())
                .transpose()
                .map_err(|e| (INTERNAL, format!("dup: {e}")))?;
            let made = Made {
                id,
                bundle,
                console,
                io: Stdio3 {
                    stdin,
                    stdout: out,
                    stderr: err,
                },
                stderr_reader: stderr_reader.as_ref(),
            };
            let oci = req.oci.as_ref().map(|r| Oci::new(&self.dir, r, bundle));
            let t0 = Instant::now();
            let made = self.runtime_create(made, oci);
            runtime = t0.elapsed();
            super::traced::record("runtime create", || self.runtime_label(id), runtime);
            made
        })();
        let built = built.and_then(|pid| {
            // A tty container's output comes from its console master.
            let master = self
                .streams
                .finish_create(id, cio)
                .map_err(|e| (INTERNAL, e))?;
            if let Some(master) = master {
                // (An OCI runtime's stderr pipe was for its own words.)
                readers.retain(|(_, s)| {
                    *s != Stream::Stdout && (req.oci.is_none() || *s != Stream::Stderr)
                });
                readers.push((master, Stream::Stdout));
            }
            Ok(pid)
        });
        match built {
            Ok(pid) => {
                for (fd, stream) in readers {
                    self.pipes.push((fd, id.to_string(), stream));
                }
                self.oom.watch(id, bundle, &req.cgroups_path);
                self.containers.insert(
                    id.to_string(),
                    Entry {
                        pid,
                        status: Status::Created,
                        exit: None,
                    },
                );
                ShimResponse {
                    runtime_us: runtime.as_micros() as u64,
                    ..self.ok(id)
                }
            }
            Err((code, e)) => {
                // A half-made container: drop the runtime's state and reap.
                let _ = self.runtime_kill(id, libc::SIGKILL, true);
                let _ = self.runtime_delete(id);
                self.logs.remove(id);
                self.reap();
                reply_err(code, e)
            }
        }
    }

    fn start(&mut self, id: &str) -> ShimResponse {
        let Some(e) = self.containers.get(id) else {
            return reply_err(NOT_FOUND, format!("container {id} not found"));
        };
        if e.status != Status::Created {
            return reply_err(
                FAILED_PRECONDITION,
                format!("container {id} is not created"),
            );
        }
        let t0 = Instant::now();
        let r = self.runtime_start(id);
        let runtime = t0.elapsed();
        super::traced::record("runtime start", || self.runtime_label(id), runtime);
        match r {
            Ok(()) => {
                if let Some(e) = self.containers.get_mut(id) {
                    if e.status == Status::Created {
                        e.status = Status::Running;
                    }
                }
                ShimResponse {
                    runtime_us: runtime.as_micros() as u64,
                    ..self.ok(id)
                }
            }
            Err((code, e)) => reply_err(code, e),
        }
    }

    fn kill(&mut self, id: &str, signal: i32, all: bool) -> ShimResponse {
        let Some(e) = self.containers.get(id) else {
            return reply_err(NOT_FOUND, format!("container {id} not found"));
        };
        if e.status == Status::Stopped && !all {
            return self.ok(id);
        }
        if let Err(err) = libcontainer::signal::Signal::try_from(signal) {
            return reply_err(INVALID, format!("signal {signal}: {err}"));
        }
        let t0 = Instant::now();
        // The init is signalled directly (no libcontainer child) when that
        // is all there is to do: a signal for the init alone, or SIGKILL to
        // the init of a PID namespace of its own, whose death the kernel
        // makes the death of every process in it. Its pid is still its own:
        // this monitor reaps it, and has not yet.
        if e.pid > 0
            && !self.v2.has(id)
            && e.status != Status::Stopped
            && (!all || (signal == libc::SIGKILL && pid_namespace_init(e.pid)))
        {
            // SAFETY: kill(2) of a pid this monitor has not reaped, with a
            // signal number libcontainer accepted.
            if unsafe { libc::kill(e.pid, signal) } != 0 {
                let err = io::Error::last_os_error();
                return reply_err(INTERNAL, format!("kill container {id}: {err}"));
            }
            let took = t0.elapsed();
            super::traced::record("kill(2)", || "kernel".into(), took);
            return ShimResponse {
                runtime_us: took.as_micros() as u64,
                ..self.ok(id)
            };
        }
        let r = self.runtime_kill(id, signal, all);
        let runtime = t0.elapsed();
        super::traced::record("runtime kill", || self.runtime_label(id), runtime);
        match r {
            Ok(()) => ShimResponse {
                runtime_us: runtime.as_micros() as u64,
                ..self.ok(id)
            },
            // An OCI runtime refuses to signal what has stopped.
            Err(_) if self.stopped(id) => self.ok(id),
            Err((code, e)) => reply_err(code, e),
        }
    }

    /// Whether `id` has stopped (its init reaped now if it had exited).
    fn stopped(&mut self, id: &str) -> bool {
        self.reap();
        self.containers
            .get(id)
            .is_some_and(|e| e.status == Status::Stopped)
    }

    fn delete(&mut self, id: &str, force: bool) -> ShimResponse {
        let Some(e) = self.containers.get(id) else {
            // Left by a previous shim that was killed: clean up its state.
            if self.runtime_has_leftover(id) {
                let _ = self.runtime_kill(id, libc::SIGKILL, true);
                if let Err((code, err)) = self.runtime_delete(id) {
                    return reply_err(code, err);
                }
                return self.ok(id);
            }
            return reply_err(NOT_FOUND, format!("container {id} not found"));
        };
        if e.status == Status::Running && !force {
            return reply_err(FAILED_PRECONDITION, format!("container {id} is running"));
        }
        if e.status != Status::Stopped {
            // Kill and reap first, so the cgroup is empty when it is removed.
            let _ = self.kill(id, libc::SIGKILL, true);
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                self.reap();
                if self
                    .containers
                    .get(id)
                    .map(|e| e.status == Status::Stopped)
                    .unwrap_or(true)
                {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let label = super::traced::active().then(|| self.runtime_label(id));
        let t0 = Instant::now();
        if let Err((code, err)) = self.runtime_delete(id) {
            return reply_err(code, err);
        }
        let runtime = t0.elapsed();
        super::traced::record("runtime delete", || label.unwrap_or_default(), runtime);
        self.reap();
        self.drain_logs(Some(id));
        self.pipes.retain(|(_, c, _)| c != id);
        self.logs.remove(id);
        self.streams.forget(id);
        self.oom.forget(id);
        self.containers.remove(id);
        ShimResponse {
            runtime_us: runtime.as_micros() as u64,
            ..self.ok(id)
        }
    }

    fn drain_then_reopen(&mut self, id: &str) -> std::io::Result<()> {
        self.drain_logs(Some(id));
        match self.logs.get_mut(id) {
            Some(w) => w.reopen(),
            None => Ok(()),
        }
    }

    pub(super) fn serve_one(&mut self, mut conn: UnixStream) {
        let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
        let _ = conn.set_write_timeout(Some(Duration::from_secs(10)));
        let resp = match read_msg::<ShimRequest>(&mut conn) {
            Ok(ShimRequest {
                request: Some(Request::Exec(x)),
                ..
            }) => {
                match self.containers.get(&x.id).map(|e| e.status) {
                    Some(Status::Running) => {}
                    Some(_) => {
                        let _ = write_msg(
                            &mut conn,
                            &reply_err(
                                FAILED_PRECONDITION,
                                format!("container {} is not running", x.id),
                            ),
                        );
                        return;
                    }
                    None => {
                        let _ = write_msg(
                            &mut conn,
                            &reply_err(NOT_FOUND, format!("container {} not found", x.id)),
                        );
                        return;
                    }
                }
                let oci = self.oci_of(&x.id);
                let started = if self.v2.has(&x.id) {
                    self.v2_exec(&x, conn)
                } else {
                    super::exec::start(&self.youki, &self.dir, &x, conn, oci)
                };
                match started {
                    Ok(p) => self.execs.push(p),
                    Err(((code, e), mut conn)) => {
                        let _ = write_msg(&mut conn, &reply_err(code, e));
                    }
                }
                return;
            }
            Ok(ShimRequest {
                request: Some(Request::StreamExec(x)),
                ..
            }) => match self.containers.get(&x.id).map(|e| e.status) {
                Some(Status::Running) if self.v2.has(&x.id) => {
                    self.v2_stream_exec(&x, conn);
                    return;
                }
                Some(Status::Running) => {
                    let oci = self.oci_of(&x.id);
                    self.streams.exec(&self.youki, &self.dir, &x, conn, oci);
                    return;
                }
                Some(_) => reply_err(
                    FAILED_PRECONDITION,
                    format!("container {} is not running", x.id),
                ),
                None => reply_err(NOT_FOUND, format!("container {} not found", x.id)),
            },
            Ok(ShimRequest {
                request: Some(Request::Attach(a)),
                ..
            }) => match self.containers.get(&a.id).map(|e| e.status) {
                Some(Status::Running) => {
                    self.streams.attach(&a, conn);
                    return;
                }
                Some(_) => reply_err(
                    FAILED_PRECONDITION,
                    format!("container {} is not running", a.id),
                ),
                None => reply_err(NOT_FOUND, format!("container {} not found", a.id)),
            },
            Ok(req) => {
                let traced = super::traced::begin(&req);
                let mut resp = self.handle(req);
                if let Some(t) = traced {
                    super::traced::finish(t, &mut resp);
                }
                resp
            }
            Err(e) => reply_err(INVALID, format!("bad request: {e}")),
        };
        let _ = write_msg(&mut conn, &resp);
    }

    /// Drains exec pipes and answers the execs that are done.
    pub(super) fn poll_execs(&mut self) {
        let now = std::time::Instant::now();
        // A shim's exec is killed through its shim.
        let expired: Vec<String> = self
            .execs
            .iter()
            .filter(|x| x.deadline_passed(now))
            .filter_map(|x| x.exec_id.clone())
            .collect();
        for e in expired {
            self.v2_kill_exec(&e);
        }
        for x in self.execs.iter_mut() {
            x.drain();
        }
        self.execs.retain_mut(|x| !x.poll(now));
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_init_of_a_pid_namespace_is_told_apart() {
        // This process is no namespace's init; the node's init is its own
        // namespace's; a process that is gone is nobody's.
        assert!(!super::pid_namespace_init(std::process::id() as i32));
        assert!(super::pid_namespace_init(1));
        assert!(!super::pid_namespace_init(i32::MAX));
    }
}
