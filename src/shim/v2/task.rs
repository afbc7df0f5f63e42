//! A container's life through its shim v2 runtime, in the monitor: create
//! (starting the shim, or joining the pod's), start, kill, delete.

use super::client::{CallError, Client};
use super::fifo::{fifo, open, reader};
use super::start::Launch;
use super::{any, call_failure, internal, Conn, Task, INTERNAL};
use crate::api::containerd::{
    ConnectRequest, ConnectResponse, CreateTaskRequest, CreateTaskResponse, DeleteRequest,
    DeleteResponse, KillRequest, ShutdownRequest, StartRequest, StartResponse,
};
use crate::api::shim::{CreateRequest, ShimResponse};
use crate::logs::{CriLogWriter, Stream, DEFAULT_MAX_LINE};
use crate::shim::monitor::{reply_err, Entry, Shim, Status};
use crate::shim::runtime_call::Failure;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

impl Shim {
    /// CreateRequest for a container of a shim runtime.
    pub(in crate::shim) fn v2_create(&mut self, req: &CreateRequest) -> ShimResponse {
        let t0 = Instant::now();
        match self.v2_make(req) {
            Ok(pid) => {
                self.containers.insert(
                    req.id.clone(),
                    Entry {
                        pid,
                        status: Status::Created,
                        exit: None,
                    },
                );
                ShimResponse {
                    runtime_us: t0.elapsed().as_micros() as u64,
                    ..self.ok(&req.id)
                }
            }
            Err((code, e)) => {
                self.v2_unmake(&req.id);
                reply_err(code, e)
            }
        }
    }

    fn v2_make(&mut self, req: &CreateRequest) -> Result<i32, Failure> {
        let id = req.id.as_str();
        let rt = req.oci.clone().unwrap_or_default();
        let sv = rt.shim.clone().unwrap_or_default();
        let timeout = Duration::from_millis(if rt.timeout_ms == 0 {
            10_000
        } else {
            rt.timeout_ms as u64
        });
        if self.v2.events.is_none() {
            let ev = super::events::Events::bind(&self.dir.join("ev.sock"))
                .map_err(internal("bind the events endpoint"))?;
            self.v2.events = Some(ev);
        }
        let io = self.dir.join("v2io").join(id);
        self.v2.tasks.insert(
            id.to_string(),
            Task {
                address: String::new(),
                bundle: PathBuf::from(&req.bundle),
                io: io.clone(),
                binary: PathBuf::from(&rt.path),
                runtime: sv.clone(),
                timeout,
                oom_kills: 0,
                adopted: false,
            },
        );
        // A container nobody reads or writes (the pause) gets no FIFOs,
        // as containerd gives it none.
        let piped = !req.log_path.is_empty() || req.stdin || req.tty;
        let mut outs: Vec<(OwnedFd, Stream)> = Vec::new();
        let mut stdin = None;
        let (mut in_path, mut out_path, mut err_path) =
            (String::new(), String::new(), String::new());
        if piped {
            std::fs::create_dir_all(&io).map_err(internal("create the FIFO dir"))?;
            outs.push((reader(&io.join("stdout"))?, Stream::Stdout));
            out_path = io.join("stdout").display().to_string();
            // A terminal's output is all on stdout.
            if !req.tty {
                outs.push((reader(&io.join("stderr"))?, Stream::Stderr));
                err_path = io.join("stderr").display().to_string();
            }
            if req.stdin {
                let p = io.join("stdin");
                fifo(&p)?;
                // Held both ways: opening never waits, and the shim's end
                // sees EOF only when the monitor closes it.
                stdin = Some(open(&p, rustix::fs::OFlags::RDWR)?);
                in_path = p.display().to_string();
            }
        }
        if !req.log_path.is_empty() {
            let max = if req.max_log_line == 0 {
                DEFAULT_MAX_LINE
            } else {
                req.max_log_line as usize
            };
            let w = CriLogWriter::open(Path::new(&req.log_path), max)
                .map_err(|e| (INTERNAL, format!("open log {}: {e}", req.log_path)))?;
            self.logs.insert(id.to_string(), w);
        }
        let options = (!sv.options_type_url.is_empty())
            .then(|| any(&sv.options_type_url, sv.options.clone()));
        let address = self.v2_shim_for(
            id,
            Path::new(&req.bundle),
            &rt.path,
            &sv,
            options.as_ref(),
            timeout,
        )?;
        if let Some(t) = self.v2.tasks.get_mut(id) {
            t.address = address.clone();
        }
        let create = CreateTaskRequest {
            id: id.to_string(),
            bundle: req.bundle.clone(),
            rootfs: Vec::new(),
            terminal: req.tty,
            stdin: in_path,
            stdout: out_path,
            stderr: err_path,
            options,
            ..Default::default()
        };
        let conn = self
            .v2
            .conns
            .get_mut(&address)
            .ok_or((INTERNAL, "the shim's connection is gone".to_string()))?;
        let mut made: Result<CreateTaskResponse, CallError> =
            conn.client.call("Create", &create, timeout);
        // A shim of the older API answers v3's Create Unimplemented.
        if matches!(&made, Err(CallError::Status { code: 12, .. })) && conn.version >= 3 {
            conn.client.service = "containerd.task.v2.Task".into();
            conn.version = 2;
            made = conn.client.call("Create", &create, timeout);
        }
        let made = made.map_err(|e| call_failure(&format!("create container {id}"), e))?;
        conn.tasks.insert(id.to_string());
        let version = conn.version;
        self.v2_save(id, version);
        // Its OOM kills are counted in its cgroup too, when it has one here.
        self.oom
            .watch(id, Path::new(&req.bundle), &req.cgroups_path);
        for (fd, stream) in outs {
            self.pipes.push((fd, id.to_string(), stream));
        }
        self.streams.keep(id, stdin, req.stdin_once);
        Ok(made.pid as i32)
    }

    /// The address of the shim that runs `id`: the pod's when a 2.3 shim
    /// already runs its sandbox (containerd skips `start` then too), else
    /// what `start` answers (a grouping shim answers its running one).
    fn v2_shim_for(
        &mut self,
        id: &str,
        bundle: &Path,
        binary: &str,
        sv: &crate::api::shim::ShimV2,
        options: Option<&prost_types::Any>,
        timeout: Duration,
    ) -> Result<String, Failure> {
        if sv.sandbox_id != id {
            let pod = self.v2.tasks.get(&sv.sandbox_id).map(|t| t.address.clone());
            if let Some(a) = pod.filter(|a| self.v2.conns.get(a).is_some_and(|c| c.version >= 3)) {
                return Ok(a);
            }
        }
        let log_path = bundle.join("log");
        fifo(&log_path)?;
        let log = open(
            &log_path,
            rustix::fs::OFlags::RDWR | rustix::fs::OFlags::NONBLOCK,
        )?;
        super::fifo::copy_log(&log_path)?;
        let launch = Launch {
            binary: Path::new(binary),
            id,
            bundle,
            grpc_address: &sv.grpc_address,
            ttrpc_address: &self.dir.join("ev.sock"),
            socket_dir: &sv.socket_dir,
            options: options.cloned(),
            timeout,
        };
        let started = launch.start();
        // `start` is this monitor's child; it has exited.
        self.reap();
        let started = started?;
        if self.v2.conns.contains_key(&started.address) {
            return Ok(started.address);
        }
        let mut client = Client::connect(&started.address, started.version).map_err(|e| {
            (
                9,
                format!("shim {binary}: dial its address {}: {e}", started.address),
            )
        })?;
        let pid = client
            .call::<_, ConnectResponse>("Connect", &ConnectRequest { id: id.to_string() }, timeout)
            .map(|r| r.shim_pid as i32)
            .unwrap_or(0);
        self.v2.conns.insert(
            started.address.clone(),
            Conn {
                client,
                version: started.version,
                pid,
                tasks: Default::default(),
                log: Some(log),
            },
        );
        Ok(started.address)
    }

    /// Undoes what a failed create made.
    fn v2_unmake(&mut self, id: &str) {
        let _ = self.v2_delete(id);
        self.logs.remove(id);
        self.pipes.retain(|(_, c, _)| c != id);
        self.streams.forget(id);
    }

    /// Calls `method` on the shim of `id`.
    pub(super) fn v2_call<Q: prost::Message, R: prost::Message + Default>(
        &mut self,
        id: &str,
        method: &str,
        req: &Q,
    ) -> Result<R, CallError> {
        let (address, timeout) = match self.v2.tasks.get(id) {
            Some(t) => (t.address.clone(), t.timeout),
            None => return Err(CallError::Closed(format!("container {id} has no shim"))),
        };
        match self.v2.conns.get_mut(&address) {
            Some(c) => c.client.call(method, req, timeout),
            None => Err(CallError::Closed(format!("the shim of {id} is gone"))),
        }
    }

    pub(in crate::shim) fn v2_start(&mut self, id: &str) -> Result<(), Failure> {
        let r: StartResponse = self
            .v2_call(
                id,
                "Start",
                &StartRequest {
                    id: id.to_string(),
                    exec_id: String::new(),
                },
            )
            .map_err(|e| call_failure(&format!("start container {id}"), e))?;
        if let Some(e) = self.containers.get_mut(id) {
            e.pid = r.pid as i32;
        }
        Ok(())
    }

    pub(in crate::shim) fn v2_kill(
        &mut self,
        id: &str,
        signal: i32,
        all: bool,
    ) -> Result<(), Failure> {
        let r: Result<(), CallError> = self.v2_call(
            id,
            "Kill",
            &KillRequest {
                id: id.to_string(),
                exec_id: String::new(),
                signal: signal as u32,
                all,
            },
        );
        match r {
            Ok(()) => Ok(()),
            // What has exited cannot be signalled.
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(call_failure(&format!("kill container {id}"), e)),
        }
    }

    /// Deletes `id` in its shim, and ends the shim with its last task.
    pub(in crate::shim) fn v2_delete(&mut self, id: &str) -> Result<(), Failure> {
        let Some(address) = self.v2.tasks.get(id).map(|t| t.address.clone()) else {
            return Ok(());
        };
        let timeout = self.v2.tasks.get(id).map(|t| t.timeout).unwrap_or_default();
        // A task a killed monitor left was just killed: it is deleted once
        // gone.
        let adopted = self.v2.tasks.get(id).is_some_and(|t| t.adopted);
        if adopted && !self.containers.contains_key(id) && self.v2.conns.contains_key(&address) {
            self.v2_wait(id);
        }
        let Some(mut c) = self.v2.conns.remove(&address) else {
            // Its shim is gone (or never answered its create).
            if let Some(t) = self.v2.tasks.remove(id) {
                let _ = std::fs::remove_dir_all(&t.io);
            }
            self.v2_forget_record(id);
            return Ok(());
        };
        if c.tasks.contains(id) {
            let r: Result<DeleteResponse, CallError> = c.client.call(
                "Delete",
                &DeleteRequest {
                    id: id.to_string(),
                    exec_id: String::new(),
                },
                timeout,
            );
            match r {
                Err(e) if !e.is_not_found() => {
                    self.v2.conns.insert(address, c);
                    return Err(call_failure(&format!("delete container {id}"), e));
                }
                _ => {
                    c.tasks.remove(id);
                }
            }
        }
        let conn = Some(c);
        if let Some(mut c) = conn {
            if c.tasks.is_empty() {
                let shut: Result<(), CallError> = c.client.call(
                    "Shutdown",
                    &ShutdownRequest {
                        id: id.to_string(),
                        now: false,
                    },
                    Duration::from_secs(3),
                );
                // (A shim that still runs tasks of another monitor's
                // ignores it; one that exits removes its socket.) A shim
                // this monitor started (it holds its log) that cannot be
                // told is not left.
                if shut.is_err() && c.pid > 0 && c.log.is_some() {
                    // SAFETY: kill(2) of the shim's server, this monitor's
                    // child (not yet reaped: its pid is still its own).
                    unsafe {
                        libc::kill(c.pid, libc::SIGKILL);
                    }
                    super::remove_socket(&address);
                }
            } else {
                self.v2.conns.insert(address, c);
            }
        }
        if let Some(t) = self.v2.tasks.remove(id) {
            let _ = std::fs::remove_dir_all(&t.io);
        }
        self.v2_forget_record(id);
        Ok(())
    }
}
