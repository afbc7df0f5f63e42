//! StopPodSandbox and RemovePodSandbox: idempotent teardown. CNI DEL runs
//! in parallel with the pause's kill (a pod that has one) and the shim's
//! exit (a stopped pod needs no monitor: its exits are recorded); a fresh
//! shim cleans up after a killed one.

use super::SandboxError;
use crate::api::shim::{
    shim_request::Request, DeleteRequest, KillRequest, ShimResponse, ShutdownRequest, StateRequest,
};
use crate::network::cni::NetworkList;
use crate::network::netns::{self};
use crate::shim::client;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::manager::*;
use super::shim_call::{shim_call, wait_gone};

impl SandboxManager {
    /// When the pod's shim is gone (killed) but container `container` still
    /// has a runtime's state (libcontainer's, or the record of the OCI
    /// runtime that runs it), starts a fresh shim to clean it up.
    pub fn ensure_shim(&self, sandbox_id: &str, container: &str) -> Result<(), SandboxError> {
        let shim_dir = self.shim_dir(sandbox_id);
        if client::pid(&shim_dir).is_none() && crate::shim::has_runtime_state(&shim_dir, container)
        {
            crate::metrics::get().shim_crashes.inc();
            client::ensure(&self.paths.exe, &shim_dir)
                .map_err(|e| SandboxError::Shim(e.to_string()))?;
            crate::metrics::get().shim_recoveries.inc();
        }
        Ok(())
    }

    /// StopPodSandbox: idempotent; an unknown id is success.
    pub async fn stop(self: &Arc<Self>, id: &str) -> Result<(), SandboxError> {
        let Some(id) = self.resolve(id) else {
            return Ok(());
        };
        let _lock = self.locks.lock(&id).await;
        let this = self.clone();
        crate::otel::spawn_blocking(move || this.stop_blocking(&id))
            .await
            .map_err(|e| SandboxError::Shim(format!("stop task: {e}")))?
    }

    fn stop_blocking(&self, id: &str) -> Result<(), SandboxError> {
        let Some(mut rec) = self.get(id) else {
            return Ok(());
        };
        if rec.stopped {
            return Ok(());
        }
        let t0 = Instant::now();
        let mut steps = crate::timing::Stages::new("StopPodSandbox");
        let shim_dir = self.shim_dir(id);
        if rec.netns.is_some() {
            // The plugins' DEL leaves the CPU mostly idle: time to make the
            // next pod's spare.
            self.spare.nudge();
        }
        // A pod's own mount namespace (`podns`), and its netns pin in it,
        // go when its shim exits below: the DEL has the netns by a
        // descriptor held until it is done.
        let held = rec
            .netns
            .as_deref()
            .filter(|_| rec.own_mount_ns)
            .and_then(super::podns::hold_netns);
        let netns = match &held {
            Some(f) => Some(super::podns::held_path(f)),
            None => rec.netns.clone(),
        };
        // CNI DEL and the pause kill are independent: run them together.
        std::thread::scope(|scope| -> Result<(), SandboxError> {
            let del = scope.spawn(crate::otel::carry(|| -> Result<(), SandboxError> {
                if let Some(ns) = &netns {
                    let c = self.saved_config(id);
                    let md = c.metadata.clone().unwrap_or_default();
                    let net = match rec.cni_conf.as_ref().filter(|p| p.exists()) {
                        Some(p) => Some(NetworkList::load(p)?),
                        None => NetworkList::load_first(&self.paths.cni_conf_dir)?,
                    };
                    if let Some(net) = net {
                        self.cni().del(&net, &self.attachment(id, ns, &md, &c))?;
                    }
                }
                Ok(())
            }));
            let shim = client::pid(&shim_dir).is_some();
            if shim && rec.has_pause() {
                let killed = shim_call(
                    &shim_dir,
                    Request::Kill(KillRequest {
                        id: id.to_string(),
                        signal: libc::SIGKILL,
                        all: true,
                    }),
                );
                let runtime = killed.map(|r| r.runtime_us).unwrap_or(0);
                steps.end_split(
                    "pause kill",
                    "pause runtime",
                    Duration::from_micros(runtime),
                );
                let deadline = Instant::now() + Duration::from_secs(10);
                while Instant::now() < deadline {
                    match shim_call(
                        &shim_dir,
                        Request::State(StateRequest { id: id.to_string() }),
                    ) {
                        Ok(r)
                            if r.state
                                .as_ref()
                                .map(|s| s.status != "running" && s.status != "created")
                                .unwrap_or(true) =>
                        {
                            break
                        }
                        Err(_) => break,
                        _ => std::thread::sleep(Duration::from_millis(1)),
                    }
                }
                steps.end_external("pause exit");
                // While CNI DEL runs: drop the dead pause's state and
                // cgroup, and its rootfs mount (RemovePodSandbox would).
                let deleted = shim_call(
                    &shim_dir,
                    Request::Delete(DeleteRequest {
                        id: id.to_string(),
                        force: true,
                    }),
                );
                let runtime = deleted.map(|r| r.runtime_us).unwrap_or(0);
                steps.end_split(
                    "pause delete",
                    "pause runtime",
                    Duration::from_micros(runtime),
                );
                let bundle = self.sandbox_dir(id).join("bundle");
                let rootfs = bundle.join("rootfs");
                if rustix::mount::unmount(&rootfs, rustix::mount::UnmountFlags::DETACH).is_ok() {
                    // Its layers too (RemovePodSandbox would), while DEL runs.
                    for d in ["upper", "work"] {
                        let _ = std::fs::remove_dir_all(bundle.join(d));
                    }
                }
                steps.end("pause unmount");
            }
            if shim {
                // Nothing runs in the pod now (its containers were stopped
                // first): the shim deletes what is left of them and exits
                // here, while CNI DEL runs, rather than at removal. A
                // container still created (never started) keeps it up.
                let shutdown = ShutdownRequest {
                    delete_stopped: true,
                };
                if shim_call(&shim_dir, Request::Shutdown(shutdown)).is_ok() {
                    wait_gone(&shim_dir, Duration::from_secs(10));
                }
                steps.end("shim exit");
            }
            let r = del
                .join()
                .map_err(|_| SandboxError::Shim("CNI DEL thread panicked".into()))?;
            steps.end_external("cni wait");
            r
        })?;
        if let Some(shm) = &rec.shm {
            match rustix::mount::unmount(shm, rustix::mount::UnmountFlags::DETACH) {
                Ok(()) | Err(rustix::io::Errno::INVAL) | Err(rustix::io::Errno::NOENT) => {}
                Err(e) => return Err(SandboxError::io("unmount shm")(e.into())),
            }
        }
        rec.state = SandboxState::NotReady;
        rec.stopped = true;
        self.write_record(&rec)?;
        steps.end("record");
        steps.finish();
        tracing::info!(pod_sandbox_id = %id, ms = t0.elapsed().as_secs_f64() * 1e3, "pod sandbox stopped");
        Ok(())
    }

    /// RemovePodSandbox: stops first; idempotent; an unknown id is success.
    pub async fn remove(self: &Arc<Self>, id: &str) -> Result<(), SandboxError> {
        let Some(id) = self.resolve(id) else {
            return Ok(());
        };
        self.stop(&id).await?;
        let _lock = self.locks.lock(&id).await;
        let this = self.clone();
        crate::otel::spawn_blocking(move || this.remove_blocking(&id))
            .await
            .map_err(|e| SandboxError::Shim(format!("remove task: {e}")))?
    }

    fn remove_blocking(&self, id: &str) -> Result<(), SandboxError> {
        let Some(rec) = self.get(id) else {
            return Ok(());
        };
        let shim_dir = self.shim_dir(id);
        let t0 = Instant::now();
        let mut steps = crate::timing::Stages::new("RemovePodSandbox");
        tracing::debug!(pod_sandbox_id = %id, shim = ?client::pid(&shim_dir), "removing");
        self.ensure_shim(id, id)?;
        let shim = client::pid(&shim_dir).is_some();
        if shim && rec.has_pause() {
            let deleted = shim_call(
                &shim_dir,
                Request::Delete(DeleteRequest {
                    id: id.to_string(),
                    force: true,
                }),
            )
            .or_else(|e| {
                if e.to_string().contains("not found") {
                    Ok(ShimResponse::default())
                } else {
                    Err(e)
                }
            })?;
            let runtime = Duration::from_micros(deleted.runtime_us);
            steps.end_split("pause delete", "pause runtime", runtime);
        }
        if shim {
            shim_call(&shim_dir, Request::Shutdown(ShutdownRequest::default()))?;
            steps.end("shim shutdown");
            wait_gone(&shim_dir, Duration::from_secs(10));
            steps.end("shim exit");
        }
        let dir = self.sandbox_dir(id);
        for m in crate::sys::mounts_within(&dir, 3) {
            rustix::mount::unmount(&m, rustix::mount::UnmountFlags::DETACH)
                .map_err(|e| SandboxError::io(format!("unmount {}", m.display()))(e.into()))?;
        }
        steps.end("unmount");
        let user = rec.userns.as_ref().map(|u| u.pin.clone());
        for p in [&rec.netns, &rec.ipcns, &rec.utsns, &user]
            .into_iter()
            .flatten()
        {
            netns::remove(&super::podns::node_side(p))
                .map_err(SandboxError::io("remove namespace pin"))?;
        }
        let _ = std::fs::remove_dir(self.paths.state.join("ns").join(id));
        steps.end("namespaces");
        // The shim's dir and the sandbox's, side by side.
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let _ = std::fs::remove_dir_all(&shim_dir);
            });
            std::fs::remove_dir_all(&dir).or_else(|e| {
                if e.kind() == std::io::ErrorKind::NotFound {
                    Ok(())
                } else {
                    Err(e)
                }
            })
        })
        .map_err(SandboxError::io("remove sandbox dir"))?;
        let mut inner = self.lock_inner();
        inner.records.remove(id);
        inner.names.remove(&rec.reserved_name());
        steps.end("files");
        let steps = steps.finish();
        tracing::info!(pod_sandbox_id = %id, ms = t0.elapsed().as_secs_f64() * 1e3, ?steps, "pod sandbox removed");
        Ok(())
    }
}
