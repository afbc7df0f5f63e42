//! Streaming exec and attach inside the shim, and the stdio a container
//! keeps for them.
//!
//! - Stream exec: a tenant process (the container's user, env, caps) with
//!   pipes, or a terminal whose master libcontainer sends over a console
//!   socket; the server's ends go back over the request's connection with
//!   SCM_RIGHTS, and the exit code follows on it when the process is
//!   reaped. A connection closed early kills the process.
//! - Container stdio: with config stdin the shim keeps the write end of
//!   the container's stdin pipe; with tty it keeps the console master
//!   (whose output feeds the CRI log as stdout).
//! - Attach: the client gets a stdin writer (a dup) and fresh pipes that
//!   receive a copy of the container's output from then on. The shim never
//!   blocks on an attacher: a full pipe loses that chunk for that client.
//!   The attach connection closing after a stdin_once client used stdin
//!   closes the container's stdin.

use super::console::{console_listener, receive_master, take_master};
use super::exec_parts::pipe;
use super::fdpass;
use super::wire::write_msg;
use crate::api::shim::{
    AttachRequest, CreateRequest, ExecResult, ShimResponse, StreamExecRequest, StreamFds,
};
use crate::logs::Stream;
use libcontainer::container::builder::ContainerBuilder;
use libcontainer::container::Container;
use libcontainer::syscall::syscall::SyscallType;
use std::collections::HashMap;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A stream exec whose exit is awaited.
struct Exec {
    pid: i32,
    conn: Option<UnixStream>,
    /// A shim v2 runtime's exec id: its exit comes as an event, and it is
    /// killed through its shim.
    exec_id: Option<String>,
}

/// What a container keeps for attach.
struct Stdio {
    stdin: Option<OwnedFd>,
    stdin_once: bool,
    /// A dup of the console master (tty containers).
    master: Option<OwnedFd>,
}

struct Attacher {
    id: String,
    out: Option<OwnedFd>,
    err: Option<OwnedFd>,
    conn: Option<UnixStream>,
    used_stdin: bool,
}

#[derive(Default)]
pub struct Streams {
    execs: Vec<Exec>,
    stdio: HashMap<String, Stdio>,
    attachers: Vec<Attacher>,
}

/// The stdio a container is created with.
pub struct CreateIo {
    child_stdin: Option<OwnedFd>,
    keep_stdin: Option<OwnedFd>,
    console: Option<(UnixListener, PathBuf)>,
    stdin_once: bool,
}

impl CreateIo {
    /// The container's stdin (a pipe's read end, or /dev/null).
    pub fn take_stdin(&mut self) -> Result<OwnedFd, String> {
        match self.child_stdin.take() {
            Some(f) => Ok(f),
            None => std::fs::File::open("/dev/null")
                .map(OwnedFd::from)
                .map_err(|e| e.to_string()),
        }
    }

    /// The console socket libcontainer sends the terminal master to.
    pub fn console_socket(&self) -> Option<PathBuf> {
        self.console.as_ref().map(|(_, p)| p.clone())
    }
}

fn dup(fd: &OwnedFd) -> Result<OwnedFd, String> {
    rustix::io::fcntl_dupfd_cloexec(fd, 3).map_err(|e| format!("dup: {e}"))
}

impl Streams {
    /// Stdio for a container about to be created.
    pub fn prepare_create(&self, dir: &Path, req: &CreateRequest) -> Result<CreateIo, String> {
        let mut io = CreateIo {
            child_stdin: None,
            keep_stdin: None,
            console: None,
            stdin_once: req.stdin_once,
        };
        if req.tty {
            io.console = Some(console_listener(dir)?);
        } else if req.stdin {
            let (r, w) = pipe()?;
            io.child_stdin = Some(r);
            io.keep_stdin = Some(w);
        }
        Ok(io)
    }

    /// After a successful create: keeps the container's stdin and returns
    /// the console master (to be read into the log) for a tty container.
    pub fn finish_create(&mut self, id: &str, mut io: CreateIo) -> Result<Option<OwnedFd>, String> {
        let master = match io.console.take() {
            Some((l, path)) => Some(receive_master(&l, &path)?),
            None => None,
        };
        let kept = match &master {
            Some(m) => Some(dup(m)?),
            None => None,
        };
        if let Some(m) = &master {
            rustix::io::ioctl_fionbio(m, true).map_err(|e| format!("console: {e}"))?;
        }
        self.stdio.insert(
            id.to_string(),
            Stdio {
                stdin: io.keep_stdin.take(),
                stdin_once: io.stdin_once,
                master: kept,
            },
        );
        Ok(master)
    }

    /// Keeps the stdin writer of a container whose stdio is FIFOs (a shim
    /// v2 runtime's).
    pub fn keep(&mut self, id: &str, stdin: Option<OwnedFd>, stdin_once: bool) {
        self.stdio.insert(
            id.to_string(),
            Stdio {
                stdin,
                stdin_once,
                master: None,
            },
        );
    }

    /// Drops what a deleted container kept, and its attachers.
    pub fn forget(&mut self, id: &str) {
        self.stdio.remove(id);
        self.attachers.retain(|a| a.id != id);
    }

    /// Starts a stream exec; answers on `conn` (descriptors, then exit).
    pub fn exec(
        &mut self,
        youki: &Path,
        dir: &Path,
        req: &StreamExecRequest,
        conn: UnixStream,
        oci: Option<super::oci::Oci>,
    ) {
        let started = match oci {
            Some(o) => super::oci_exec::stream(&o, dir, req),
            None => start_exec(youki, dir, req)
                .map_err(|e| super::lookpath::failure(&format!("exec in {}", req.id), e)),
        };
        self.exec_started(started, conn, None);
    }

    /// Answers a stream exec on `conn`: its descriptors (then its exit, to
    /// come), or why it did not start.
    pub fn exec_started(
        &mut self,
        started: Result<(i32, Vec<OwnedFd>, StreamFds), super::runtime_call::Failure>,
        mut conn: UnixStream,
        exec_id: Option<String>,
    ) {
        match started {
            Ok((pid, fds, which)) => {
                let borrowed: Vec<BorrowedFd<'_>> = fds.iter().map(|f| f.as_fd()).collect();
                let resp = ShimResponse {
                    fds: Some(StreamFds { pid, ..which }),
                    ..Default::default()
                };
                let sent = fdpass::send(&mut conn, &resp, &borrowed).is_ok();
                drop(fds);
                if !sent && exec_id.is_none() {
                    // SAFETY: kill(2) on the process just started.
                    unsafe {
                        libc::kill(pid, libc::SIGKILL);
                    }
                }
                let _ = conn.set_nonblocking(true);
                self.execs.push(Exec {
                    pid,
                    conn: sent.then_some(conn),
                    exec_id,
                });
            }
            Err((code, e)) => {
                let _ = write_msg(
                    &mut conn,
                    &ShimResponse {
                        error: e,
                        code,
                        ..Default::default()
                    },
                );
            }
        }
    }

    /// Whether the stream exec of a shim, `exec_id`, is still awaited
    /// with its connection (the server got its descriptors).
    pub fn has_exec(&self, exec_id: &str) -> bool {
        self.execs
            .iter()
            .any(|x| x.exec_id.as_deref() == Some(exec_id) && x.conn.is_some())
    }

    /// Records a reaped pid; true when it was a stream exec.
    pub fn exited(&mut self, pid: i32, code: i32) -> bool {
        let Some(i) = self
            .execs
            .iter()
            .position(|x| x.pid == pid && x.exec_id.is_none())
        else {
            return false;
        };
        self.answer_exit(i, code);
        true
    }

    /// Records the exit a shim told of exec `exec_id`; true when it was a
    /// stream exec.
    pub fn exec_exited(&mut self, exec_id: &str, code: i32) -> bool {
        let Some(i) = self
            .execs
            .iter()
            .position(|x| x.exec_id.as_deref() == Some(exec_id))
        else {
            return false;
        };
        self.answer_exit(i, code);
        true
    }

    fn answer_exit(&mut self, i: usize, code: i32) {
        let x = self.execs.remove(i);
        if let Some(mut c) = x.conn {
            let _ = c.set_nonblocking(false);
            let _ = c.set_write_timeout(Some(Duration::from_secs(5)));
            let _ = write_msg(
                &mut c,
                &ShimResponse {
                    exec: Some(ExecResult {
                        exit_code: code,
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            );
        }
    }

    /// Joins a running container's stdio; answers on `conn`.
    pub fn attach(&mut self, req: &AttachRequest, mut conn: UnixStream) {
        let r = (|| -> Result<(StreamFds, Vec<OwnedFd>, bool), String> {
            let st = self
                .stdio
                .get(&req.id)
                .ok_or_else(|| format!("container {} keeps no stdio in this shim", req.id))?;
            let mut which = StreamFds::default();
            let mut fds = Vec::new();
            let mut used_stdin = false;
            // Descriptors go in the order stdin, stdout, stderr, pty.
            let mut pty = None;
            if let Some(m) = &st.master {
                // A terminal: input and resize through the master.
                pty = Some(dup(m)?);
                used_stdin = req.stdin;
            } else if req.stdin {
                if let Some(s) = &st.stdin {
                    fds.push(dup(s)?);
                    which.stdin = true;
                    used_stdin = true;
                }
            }
            let mut out = None;
            let mut err = None;
            if req.stdout {
                let (r, w) = pipe()?;
                rustix::io::ioctl_fionbio(&w, true).map_err(|e| e.to_string())?;
                fds.push(r);
                which.stdout = true;
                out = Some(w);
            }
            if req.stderr && st.master.is_none() {
                let (r, w) = pipe()?;
                rustix::io::ioctl_fionbio(&w, true).map_err(|e| e.to_string())?;
                fds.push(r);
                which.stderr = true;
                err = Some(w);
            }
            if let Some(p) = pty {
                fds.push(p);
                which.pty = true;
            }
            self.attachers.push(Attacher {
                id: req.id.clone(),
                out,
                err,
                conn: None,
                used_stdin,
            });
            Ok((which, fds, used_stdin))
        })();
        match r {
            Ok((which, fds, _)) => {
                let borrowed: Vec<BorrowedFd<'_>> = fds.iter().map(|f| f.as_fd()).collect();
                let resp = ShimResponse {
                    fds: Some(which),
                    ..Default::default()
                };
                if fdpass::send(&mut conn, &resp, &borrowed).is_ok() {
                    let _ = conn.set_nonblocking(true);
                    if let Some(a) = self.attachers.last_mut() {
                        a.conn = Some(conn);
                    }
                } else {
                    self.attachers.pop();
                }
            }
            Err(e) => {
                let _ = write_msg(
                    &mut conn,
                    &ShimResponse {
                        error: e,
                        code: 9,
                        ..Default::default()
                    },
                );
            }
        }
    }

    /// Copies a chunk of container output to its attachers.
    pub fn fan_out(&mut self, id: &str, stream: Stream, data: &[u8]) {
        for a in self.attachers.iter_mut().filter(|a| a.id == id) {
            let slot = match stream {
                Stream::Stdout => &mut a.out,
                Stream::Stderr => &mut a.err,
            };
            if let Some(fd) = slot {
                match rustix::io::write(&*fd, data) {
                    Ok(_) | Err(rustix::io::Errno::AGAIN) => {}
                    Err(_) => *slot = None,
                }
            }
        }
        self.attachers
            .retain(|a| a.out.is_some() || a.err.is_some() || a.conn.is_some());
    }

    /// A container's output stream ended: its attachers see EOF.
    pub fn output_closed(&mut self, id: &str, stream: Stream) {
        for a in self.attachers.iter_mut().filter(|a| a.id == id) {
            match stream {
                Stream::Stdout => a.out = None,
                Stream::Stderr => a.err = None,
            }
        }
    }

    /// Connections to watch for the server hanging up.
    pub fn poll_fds(&self) -> Vec<BorrowedFd<'_>> {
        let execs = self.execs.iter().filter_map(|x| x.conn.as_ref());
        let attach = self.attachers.iter().filter_map(|a| a.conn.as_ref());
        execs.chain(attach).map(|c| c.as_fd()).collect()
    }

    /// Acts on connections the server closed: kills abandoned execs (a
    /// shim v2 runtime's are returned, to be killed through their shim),
    /// and ends a stdin_once container's stdin after its attach.
    pub fn check_conns(&mut self) -> Hangups {
        let mut abandoned = Vec::new();
        let hung_up = |c: &mut UnixStream| {
            let mut b = [0u8; 16];
            !matches!(c.read(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
        };
        for x in self.execs.iter_mut() {
            if x.conn.as_mut().is_some_and(hung_up) {
                x.conn = None;
                if let Some(e) = &x.exec_id {
                    abandoned.push(e.clone());
                    continue;
                }
                // SAFETY: kill(2) on a child this shim has not reaped yet.
                unsafe {
                    libc::kill(x.pid, libc::SIGKILL);
                }
            }
        }
        let mut close_stdin = Vec::new();
        for a in self.attachers.iter_mut() {
            if a.conn.as_mut().is_some_and(hung_up) {
                a.conn = None;
                if a.used_stdin {
                    close_stdin.push(a.id.clone());
                }
            }
        }
        let mut stdins = Vec::new();
        for id in close_stdin {
            if let Some(st) = self.stdio.get_mut(&id) {
                if st.stdin_once {
                    st.stdin = None;
                    stdins.push(id);
                }
            }
        }
        self.attachers
            .retain(|a| a.out.is_some() || a.err.is_some() || a.conn.is_some());
        Hangups {
            execs: abandoned,
            stdins,
        }
    }
}

/// What the server hanging up ended, for a shim v2 runtime to be told.
pub struct Hangups {
    /// Exec ids of abandoned execs.
    pub execs: Vec<String>,
    /// Containers whose stdin the shim closed (stdin_once).
    pub stdins: Vec<String>,
}

/// Starts the tenant process; returns its pid and the server's ends.
fn start_exec(
    youki: &Path,
    dir: &Path,
    req: &StreamExecRequest,
) -> Result<(i32, Vec<OwnedFd>, StreamFds), String> {
    if req.args.is_empty() {
        return Err("exec needs a command".into());
    }
    super::exec_parts::sweep_notify_sockets(&youki.join(&req.id));
    let c =
        Container::load(youki.join(&req.id)).map_err(|e| format!("container {}: {e}", req.id))?;
    let (spec, mut process) = super::exec_parts::exec_process(c.bundle(), &req.args, req.tty)?;
    let executor = super::tenant::TenantExecutor::prepare(&spec, &mut process)?;
    let file = dir.join(format!("exec-{:016x}.json", rand::random::<u64>()));
    crate::store::atomic::write_state_json(&file, &process).map_err(|e| e.to_string())?;
    let null = || {
        std::fs::File::open("/dev/null")
            .map(OwnedFd::from)
            .map_err(|e| e.to_string())
    };
    let mut mine = Vec::new();
    let mut which = StreamFds::default();
    let mut b = ContainerBuilder::new(req.id.clone(), SyscallType::default())
        .with_root_path(youki)
        .map_err(|e| e.to_string())?;
    let mut console = None;
    if req.tty {
        let (l, p) = console_listener(dir)?;
        b = b.with_console_socket(Some(&p));
        console = Some((l, p));
    } else {
        let stdin = if req.stdin {
            let (r, w) = pipe()?;
            mine.push(w);
            which.stdin = true;
            r
        } else {
            null()?
        };
        let mut out_end = |wanted: bool, flag: &mut bool| -> Result<OwnedFd, String> {
            if wanted {
                let (r, w) = pipe()?;
                mine.push(r);
                *flag = true;
                Ok(w)
            } else {
                null()
            }
        };
        let stdout = out_end(req.stdout, &mut which.stdout)?;
        let stderr = out_end(req.stderr, &mut which.stderr)?;
        b = b.with_stdin(stdin).with_stdout(stdout).with_stderr(stderr);
    }
    let sockets = super::exec_parts::notify_sockets(&youki.join(&req.id));
    let built = b
        .with_executor(executor)
        .as_tenant()
        .with_process(Some(&file))
        .with_detach(true)
        .build();
    let _ = std::fs::remove_file(&file);
    super::exec_parts::remove_new_notify_sockets(&youki.join(&req.id), &sockets);
    let pid = match built {
        Ok(pid) => pid.as_raw(),
        Err(e) => {
            if let Some((_, p)) = &console {
                let _ = std::fs::remove_file(p);
            }
            return Err(format!("exec in {}: {e:#}", req.id));
        }
    };
    if let Some((l, p)) = console {
        take_master(&l, &p, pid, &mut mine, &mut which)?;
    }
    Ok((pid, mine, which))
}
