//! What shim v2 runtimes tell the monitor: exits and OOM kills (their
//! events), and their deaths (a shim's server is this
//! monitor's child once its `start` exited).

use super::events::Event;
use super::start::Launch;
use crate::shim::monitor::{Shim, Status};
use std::time::{Duration, Instant};

impl Shim {
    /// Takes what the shims told.
    pub(in crate::shim) fn v2_pump(&mut self) {
        let events = match self.v2.events.as_mut() {
            Some(e) => e.pump(),
            None => return,
        };
        for ev in events {
            match ev {
                Event::Exit {
                    container_id,
                    exec_id,
                    status,
                    exited_at,
                } if exec_id.is_empty() => self.v2_init_exited(&container_id, status, exited_at),
                Event::Exit {
                    exec_id, status, ..
                } => {
                    if let Some(x) = self
                        .execs
                        .iter_mut()
                        .find(|x| x.exec_id.as_deref() == Some(&exec_id))
                    {
                        x.exited(status);
                    }
                    self.streams.exec_exited(&exec_id, status);
                    self.v2_forget_exec(&exec_id);
                }
                Event::Oom { container_id } => {
                    if let Some(t) = self.v2.tasks.get_mut(&container_id) {
                        t.oom_kills += 1;
                    }
                    self.v2_oom_after_exit(&container_id);
                }
            }
        }
    }

    /// An OOM kill told after the exit it caused was recorded: the record
    /// gets it (the shim publishes the two events independently).
    fn v2_oom_after_exit(&mut self, id: &str) {
        let Some(e) = self.containers.get_mut(id) else {
            return;
        };
        let Some(x) = e.exit.as_mut().filter(|x| x.oom_kills == 0) else {
            return;
        };
        x.oom_kills = 1;
        let rec = x.clone();
        let path = self.dir.join("exits").join(format!("{id}.json"));
        if let Err(err) = crate::store::atomic::write_state_json(&path, &rec) {
            eprintln!("husk shim: record the OOM kill of {id}: {err}");
        }
    }

    /// A container's init exited: its output, all of it, into the log
    /// first (the shim copies it to the FIFOs until EOF), then the exit.
    fn v2_init_exited(&mut self, id: &str, status: i32, exited_at: i64) {
        if !self.v2.has(id)
            || self
                .containers
                .get(id)
                .is_none_or(|e| e.status == Status::Stopped)
        {
            return;
        }
        let deadline = Instant::now() + Duration::from_secs(1);
        loop {
            self.drain_logs(Some(id));
            let open: Vec<_> = self
                .pipes
                .iter()
                .filter(|(_, c, _)| c == id)
                .map(|(fd, _, _)| rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN))
                .collect();
            let left = deadline.saturating_duration_since(Instant::now());
            if open.is_empty() || left.is_zero() {
                break;
            }
            let mut open = open;
            let ts = rustix::event::Timespec {
                tv_sec: 0,
                tv_nsec: left.as_nanos().min(100_000_000) as i64,
            };
            let _ = rustix::event::poll(&mut open, Some(&ts));
        }
        // What the shim told, or what the monitor saw in the container's
        // cgroup when it has one on this host (the event may come after
        // the exit).
        let told = self.v2.tasks.get(id).map(|t| t.oom_kills).unwrap_or(0);
        let oom = told.max(self.oom.exited(id, status));
        let pid = self.containers.get(id).map(|e| e.pid).unwrap_or(0);
        self.record_exit(id, pid, status, exited_at, oom);
    }

    /// Whether `pid` was a shim's server; if so its tasks are cleaned with
    /// its binary's `delete` and those still running recorded as exited.
    pub(in crate::shim) fn v2_shim_exited(&mut self, pid: i32) -> bool {
        let Some(address) = self
            .v2
            .conns
            .iter()
            .find(|(_, c)| c.pid == pid && pid > 0)
            .map(|(a, _)| a.clone())
        else {
            return false;
        };
        let Some(c) = self.v2.conns.remove(&address) else {
            return false;
        };
        eprintln!("husk shim: the shim runtime at {address} (pid {pid}) died");
        // A shim killed leaves its socket: no later `start` of its group
        // would come to replace it.
        super::remove_socket(&address);
        for id in c.tasks {
            let Some(t) = self.v2.tasks.get_mut(&id) else {
                continue;
            };
            t.address.clear();
            let launch = Launch {
                binary: &t.binary,
                id: &id,
                bundle: &t.bundle,
                grpc_address: &t.runtime.grpc_address,
                ttrpc_address: &self.dir.join("ev.sock"),
                socket_dir: &t.runtime.socket_dir,
                options: None,
                timeout: t.timeout,
            };
            let status = match launch.delete(&self.dir.join("v2io").join(".delete")) {
                Ok(r) => r.exit_status as i32,
                Err((_, e)) => {
                    eprintln!("husk shim: delete {id} after its shim died: {e}");
                    255
                }
            };
            if self
                .containers
                .get(&id)
                .is_some_and(|e| e.status != Status::Stopped)
            {
                self.drain_logs(Some(&id));
                let told = self.v2.tasks.get(&id).map(|t| t.oom_kills).unwrap_or(0);
                let oom = told.max(self.oom.exited(&id, status));
                self.record_exit(&id, 0, status, crate::sys::now_ns(), oom);
            }
        }
        true
    }
}
