//! A container's output and its end, in the shim: what its pipes hold is
//! copied into its CRI log (at EOF a stream's unended last line is written
//! as a partial record), and each exited child is reaped. A container's
//! init has its pipes drained before its exit record is written, so that
//! whoever sees the exit finds all the container wrote.

use super::monitor::{Shim, Status};
use super::ExitRecord;
use crate::logs::Stream;
use crate::sys::now_ns;

impl Shim {
    /// Copies whatever the containers' pipes hold into their logs; at EOF
    /// the stream's unended last line is written (a partial record) and
    /// the pipe dropped. `only`
    /// limits it to one container.
    pub(super) fn drain_logs(&mut self, only: Option<&str>) {
        let mut buf = vec![0u8; 64 * 1024];
        let mut closed = Vec::new();
        for (i, (fd, id, stream)) in self.pipes.iter().enumerate() {
            if only.is_some_and(|o| o != id) {
                continue;
            }
            loop {
                match rustix::io::read(fd, &mut buf) {
                    // A console master reports EIO once the terminal is gone.
                    Ok(0) | Err(rustix::io::Errno::IO) => {
                        if let Some(w) = self.logs.get_mut(id) {
                            let _ = w.close_stream(*stream);
                        }
                        self.streams.output_closed(id, *stream);
                        closed.push(i);
                        break;
                    }
                    Ok(n) => {
                        if let Some(w) = self.logs.get_mut(id) {
                            if let Err(e) = w.write(*stream, &buf[..n]) {
                                eprintln!("husk shim: log of {id}: {e}");
                            }
                        }
                        self.streams.fan_out(id, *stream, &buf[..n]);
                    }
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(_) => break,
                }
            }
        }
        for i in closed.into_iter().rev() {
            self.pipes.remove(i);
        }
    }

    /// Reaps every exited child; records exits of container inits.
    pub(super) fn reap(&mut self) {
        // Exits of shim runtimes' containers come as events.
        self.v2_pump();
        loop {
            let mut status: libc::c_int = 0;
            // SAFETY: waitpid with a valid out-pointer; WNOHANG never blocks.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid <= 0 {
                return;
            }
            let code = if libc::WIFEXITED(status) {
                libc::WEXITSTATUS(status)
            } else if libc::WIFSIGNALED(status) {
                128 + libc::WTERMSIG(status)
            } else {
                continue;
            };
            if let Some(x) = self.execs.iter_mut().find(|x| x.pid == pid) {
                x.exited(code);
                continue;
            }
            if self.streams.exited(pid, code) {
                continue;
            }
            if self.v2_shim_exited(pid) {
                continue;
            }
            let Some(id) = self
                .containers
                .iter()
                .find(|(id, e)| e.pid == pid && !self.v2.has(id))
                .map(|(id, _)| id.clone())
            else {
                continue;
            };
            // What the container wrote before it exited is in its pipes:
            // into the log before the exit is recorded, so that whoever
            // sees the exit (the kubelet's FallbackToLogsOnError, logs
            // read right after) finds all of it, as containerd waits for
            // its IO copy before it reports a task's exit.
            self.drain_logs(Some(&id));
            let oom_kills = self.oom.exited(&id, code);
            self.record_exit(&id, pid, code, now_ns(), oom_kills);
        }
    }

    /// Records that container `id` exited (on disk, then in memory).
    pub(super) fn record_exit(
        &mut self,
        id: &str,
        pid: i32,
        code: i32,
        exited_at: i64,
        oom_kills: u64,
    ) {
        let dir = self.dir.clone();
        if let Some(e) = self.containers.get_mut(id) {
            let rec = ExitRecord {
                version: 1,
                pid,
                exit_code: code,
                exited_at,
                oom_kills,
            };
            if let Err(err) = crate::store::atomic::write_state_json(
                &dir.join("exits").join(format!("{id}.json")),
                &rec,
            ) {
                eprintln!("husk shim: record exit of {id}: {err}");
            }
            e.status = Status::Stopped;
            e.exit = Some(rec);
            // Output that never went through the shim has no EOF to
            // end its attachers: the exit ends them.
            if !self.pipes.iter().any(|(_, p, _)| p == id) {
                self.streams.output_closed(id, Stream::Stdout);
                self.streams.output_closed(id, Stream::Stderr);
            }
        }
    }
}
