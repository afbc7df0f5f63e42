//! StartContainer, StopContainer, RemoveContainer, ReopenContainerLog and
//! ExecSync.

use super::events::Kind;
use crate::api::shim::{
    shim_request::Request, DeleteRequest, KillRequest, ReopenLogRequest, ShimRequest, StartRequest,
};
use crate::sandbox::SandboxError;
use crate::shim::client;
use crate::sys::now_ns;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::manager::*;
use super::record::ContainerState;

impl ContainerManager {
    /// StartContainer without NRI's events (`lifecycle.rs`).
    pub(super) async fn start_task(self: &Arc<Self>, id: &str) -> Result<(), SandboxError> {
        let id = self
            .resolve(id)
            .ok_or_else(|| SandboxError::NotFound(format!("container {id} not found")))?;
        let _l = self.locks.lock(&id).await;
        let this = self.clone();
        crate::otel::spawn_blocking(move || {
            let mut r = this
                .get(&id)
                .ok_or_else(|| SandboxError::NotFound(format!("container {id} not found")))?;
            if r.state != ContainerState::Created {
                return Err(SandboxError::Invalid(format!(
                    "container {id} is not in the created state"
                )));
            }
            // Taken before the start: a process that ends at once must not
            // look as if it finished before it started.
            let started = now_ns();
            let mut steps = crate::timing::Stages::new("StartContainer");
            let resp = shim_call(
                &this.sandboxes.shim_dir(&r.sandbox_id),
                Request::Start(StartRequest { id: id.clone() }),
            )?;
            let runtime = Duration::from_micros(resp.runtime_us);
            steps.end_split("shim start", "runtime start", runtime);
            r.state = ContainerState::Running;
            r.started_at = started;
            this.save_raising(&r, Kind::Started)?;
            steps.end("record");
            // An exit recorded before the state above was is not seen by
            // the watcher's refresh: look once.
            if this
                .sandboxes
                .shim_dir(&r.sandbox_id)
                .join("exits")
                .join(format!("{id}.json"))
                .exists()
            {
                this.refresh(&id);
            }
            steps.end("exit check");
            steps.finish();
            tracing::info!(container_id = %id, "container started");
            Ok(())
        })
        .await
        .map_err(err)?
    }

    fn kill_at(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, Instant>> {
        self.kill_at.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// StopContainer without NRI's events (`lifecycle.rs`): the stop
    /// signal, then SIGKILL to every process after `timeout`; idempotent; an unknown id is success. While a stop is
    /// under way, another one only brings its SIGKILL forward (a shorter
    /// grace period, as the kubelet sends for a second delete) and waits.
    pub(super) async fn stop_task(
        self: &Arc<Self>,
        id: &str,
        timeout: Duration,
    ) -> Result<(), SandboxError> {
        let Some(id) = self.resolve(id) else {
            return Ok(());
        };
        let under_way = {
            let mut k = self.kill_at();
            match k.get_mut(&id) {
                Some(at) => {
                    *at = (*at).min(Instant::now() + timeout);
                    true
                }
                None => false,
            }
        };
        if under_way {
            let give_up = Instant::now() + timeout + Duration::from_secs(15);
            while Instant::now() < give_up && self.kill_at().contains_key(&id) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            return Ok(());
        }
        let _l = self.locks.lock(&id).await;
        let this = self.clone();
        crate::otel::spawn_blocking(move || this.stop_blocking(&id, timeout))
            .await
            .map_err(err)?
    }

    fn stop_blocking(&self, id: &str, timeout: Duration) -> Result<(), SandboxError> {
        let Some(r) = self.refresh(id) else {
            return Ok(());
        };
        if r.state != ContainerState::Running {
            // An init that ended by itself may have left processes behind.
            if r.state == ContainerState::Exited {
                crate::cgroup::kill_all(crate::cgroup::Layout::host(), &r.cgroups_path);
            }
            return Ok(());
        }
        let mut steps = crate::timing::Stages::new("StopContainer");
        let shim_dir = self.sandboxes.shim_dir(&r.sandbox_id);
        let exited = |this: &Self| {
            this.refresh(id)
                .map(|r| r.state != ContainerState::Running)
                .unwrap_or(true)
        };
        if !timeout.is_zero() {
            self.kill_at()
                .insert(id.to_string(), Instant::now() + timeout);
            let _ = shim_call(
                &shim_dir,
                Request::Kill(KillRequest {
                    id: id.to_string(),
                    signal: r.stop_signal,
                    all: false,
                }),
            );
            steps.end("stop signal");
            let deadline = || self.kill_at().get(id).copied().unwrap_or_else(Instant::now);
            let mut pause = Pause::default();
            while Instant::now() < deadline() && !exited(self) {
                pause.sleep(Duration::from_millis(10));
            }
            steps.end_external("grace period");
        }
        if !exited(self) {
            let killed = shim_call(
                &shim_dir,
                Request::Kill(KillRequest {
                    id: id.to_string(),
                    signal: libc::SIGKILL,
                    all: true,
                }),
            );
            let runtime = Duration::from_micros(killed.map(|r| r.runtime_us).unwrap_or(0));
            steps.end_split("kill", "runtime kill", runtime);
            let deadline = Instant::now() + Duration::from_secs(10);
            let mut pause = Pause::default();
            while Instant::now() < deadline && !exited(self) {
                pause.sleep(Duration::from_millis(5));
            }
            steps.end_external("exit");
        }
        // Whatever outlived the init (execs, its children in the pod's PID
        // namespace) goes with it, as runc's kill --all does.
        let left = crate::cgroup::kill_all(crate::cgroup::Layout::host(), &r.cgroups_path);
        if left > 0 {
            tracing::info!(container_id = %id, processes = left, "killed what outlived the container's init");
        }
        self.kill_at().remove(id);
        steps.end("kill rest");
        steps.finish();
        tracing::info!(container_id = %id, "container stopped");
        Ok(())
    }

    /// RemoveContainer without NRI's events (`lifecycle.rs`): stops
    /// first; idempotent; an unknown id is success.
    pub(super) async fn remove_task(self: &Arc<Self>, id: &str) -> Result<(), SandboxError> {
        let Some(id) = self.resolve(id) else {
            return Ok(());
        };
        self.stop(&id, Duration::ZERO).await?;
        let _l = self.locks.lock(&id).await;
        let this = self.clone();
        crate::otel::spawn_blocking(move || this.remove_blocking(&id))
            .await
            .map_err(err)?
    }

    fn remove_blocking(&self, id: &str) -> Result<(), SandboxError> {
        let Some(r) = self.get(id) else { return Ok(()) };
        let mut steps = crate::timing::Stages::new("RemoveContainer");
        let shim_dir = self.sandboxes.shim_dir(&r.sandbox_id);
        // A killed shim left the container running: a fresh one removes it.
        let respawned = client::pid(&shim_dir).is_none();
        self.sandboxes.ensure_shim(&r.sandbox_id, id)?;
        let dir = self.dir(id);
        // The container's processes were reaped by its shim: its rootfs is
        // unmounted and its layers removed on a thread of their own while
        // the shim deletes libcontainer's state and cgroup. Its record and
        // config stay until that succeeded, so a failed delete leaves it
        // listed and removable. After a killed shim its processes may still
        // be dying (they hold the rootfs, and the cgroup holds them): the
        // rootfs waits for the delete then.
        let monitor = self
            .sandboxes
            .get(&r.sandbox_id)
            .and_then(|p| super::pod_mounts::monitor(&p, &shim_dir).ok().flatten());
        // In the pod's own mount namespace its mounts go first; the dirs
        // are the node's either way.
        let take_down = |dir: &Path| match monitor {
            Some(pid) => super::pod_mounts::unmount_in_pod(pid, dir)
                .map_err(SandboxError::io("unmount container rootfs"))
                .and_then(|()| remove_layers(dir)),
            None => remove_layers(dir),
        };
        let (deleted, layers) = std::thread::scope(|scope| {
            let layers = (!respawned).then(|| scope.spawn(|| take_down(&dir)));
            let deleted = if client::pid(&shim_dir).is_some() {
                match shim_call(
                    &shim_dir,
                    Request::Delete(DeleteRequest {
                        id: id.to_string(),
                        force: true,
                    }),
                ) {
                    Ok(resp) => Ok(Duration::from_micros(resp.runtime_us)),
                    Err(e) if e.to_string().contains("not found") => Ok(Duration::ZERO),
                    Err(e) => Err(e),
                }
            } else {
                Ok(Duration::ZERO)
            };
            let layers = match layers {
                Some(h) => h
                    .join()
                    .unwrap_or_else(|_| Err(SandboxError::Shim("rootfs removal panicked".into()))),
                None if deleted.is_ok() => take_down(&dir),
                None => Ok(()),
            };
            (deleted, layers)
        });
        steps.end_split(
            "shim delete",
            "runtime delete",
            *deleted.as_ref().unwrap_or(&Duration::ZERO),
        );
        deleted?;
        layers?;
        steps.end("unmount");
        std::fs::remove_dir_all(&dir)
            .or_else(|e| {
                if e.kind() == std::io::ErrorKind::NotFound {
                    Ok(())
                } else {
                    Err(e)
                }
            })
            .map_err(SandboxError::io("remove container dir"))?;
        let _ = std::fs::remove_file(shim_dir.join("exits").join(format!("{id}.json")));
        let mut g = self.lock();
        g.0.remove(id);
        g.1.remove(&r.reserved_name(&r.sandbox_id));
        self.events
            .emit(super::events::Kind::Deleted, id, &r.sandbox_id);
        drop(g);
        steps.end("files");
        steps.finish();
        tracing::info!(container_id = %id, "container removed");
        Ok(())
    }

    /// ReopenContainerLog.
    pub async fn reopen_log(self: &Arc<Self>, id: &str) -> Result<(), SandboxError> {
        let r = self
            .resolve(id)
            .and_then(|i| self.refresh(&i))
            .ok_or_else(|| SandboxError::NotFound(format!("container {id} not found")))?;
        if r.state != ContainerState::Running {
            return Err(SandboxError::Invalid(format!(
                "container {id} is not running"
            )));
        }
        let shim_dir = self.sandboxes.shim_dir(&r.sandbox_id);
        let id = r.id.clone();
        crate::otel::spawn_blocking(move || {
            shim_call(&shim_dir, Request::ReopenLog(ReopenLogRequest { id }))
        })
        .await
        .map_err(err)??;
        Ok(())
    }

    /// ExecSync: runs `cmd` in the running container; output is bounded
    /// (16 MiB per stream, a truncation is marked at the end of the
    /// stream); on timeout the process is killed and DeadlineExceeded
    /// returned, as the kubelet's exec probes expect.
    pub async fn exec_sync(
        self: &Arc<Self>,
        id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> Result<(Vec<u8>, Vec<u8>, i32), SandboxError> {
        let r = self
            .resolve(id)
            .and_then(|i| self.refresh(&i))
            .ok_or_else(|| SandboxError::NotFound(format!("container {id} not found")))?;
        if r.state != ContainerState::Running {
            return Err(SandboxError::Invalid(format!(
                "container {id} is not running"
            )));
        }
        if cmd.is_empty() {
            return Err(SandboxError::Invalid("cmd is required".into()));
        }
        let shim_dir = self.sandboxes.shim_dir(&r.sandbox_id);
        let req = crate::api::shim::ExecRequest {
            id: r.id.clone(),
            args: cmd,
            timeout_ms: timeout.as_millis() as i64,
            max_output: 0,
        };
        let wait = if timeout.is_zero() {
            Duration::from_secs(24 * 3600)
        } else {
            timeout + Duration::from_secs(30)
        };
        let resp = crate::otel::spawn_blocking(move || {
            client::call(
                &shim_dir,
                &ShimRequest {
                    request: Some(Request::Exec(req)),
                    ..Default::default()
                },
                wait,
            )
        })
        .await
        .map_err(err)?
        .map_err(|e| SandboxError::Shim(e.to_string()))?;
        let x = crate::sandbox::shim_call::answer(resp)?
            .exec
            .ok_or_else(|| SandboxError::Shim("exec answered without a result".into()))?;
        if x.timed_out {
            return Err(SandboxError::Timeout(format!(
                "command timed out after {timeout:?} and was killed"
            )));
        }
        let mark = |mut v: Vec<u8>, t: bool| {
            if t {
                v.extend_from_slice(b"\n[husk: output truncated at 16 MiB]\n");
            }
            v
        };
        Ok((
            mark(x.stdout, x.stdout_truncated),
            mark(x.stderr, x.stderr_truncated),
            x.exit_code,
        ))
    }
}

/// Unmounts what is mounted under a stopped container's dir (its rootfs,
/// volumes) and removes its overlay's directories.
fn remove_layers(dir: &Path) -> Result<(), SandboxError> {
    crate::sys::unmount_within(dir, 3).map_err(SandboxError::io("unmount container rootfs"))?;
    for d in ["rootfs", "upper", "work"] {
        match std::fs::remove_dir_all(dir.join(d)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(SandboxError::io("remove container layers")(e))
            }
            _ => {}
        }
    }
    Ok(())
}

/// Waits between checks for an exit: 100 µs at first, doubling up to a
/// most, so that a process killed outright is seen gone within a fraction
/// of a millisecond and a slow one is not polled hard.
#[derive(Default)]
struct Pause(Duration);

impl Pause {
    fn sleep(&mut self, most: Duration) {
        self.0 = (self.0 * 2).clamp(Duration::from_micros(100), most);
        std::thread::sleep(self.0);
    }
}
