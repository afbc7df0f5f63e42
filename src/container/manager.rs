//! `ContainerManager`: CreateContainer, Start, Stop, Remove, Status, List,
//! ReopenContainerLog, through the pod's shim.
//!
//! On disk, per container `<id>`: `<root>/containers/<id>/container.json`
//! (the record, versioned, atomic), `config.pb` (the CRI config),
//! `config.json` + `rootfs/` (an overlay of the image's snapshots with this
//! container's `upper/` and `work/`), `volumes/` for image VOLUMEs. The
//! container runs in its pod's shim; its exit is recorded by the shim in
//! `<state>/s/<pod>/exits/<id>.json` (watched, see `exits.rs`).
//!
//! Events: CREATED, STARTED, STOPPED and DELETED are raised where each
//! state is recorded (see `transitions.rs` for the ordering guarantees).

use super::events::Emitter;
use super::record::{ContainerRecord, ContainerState};
use crate::api::cri::ContainerConfig;
use crate::api::shim::{shim_request::Request, ShimRequest, StateRequest};
use crate::image::manager::KeyedLocks;
use crate::image::ImageManager;
use crate::sandbox::{SandboxError, SandboxManager};
use crate::shim::client;
use crate::store::atomic;
use prost::Message;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub struct ContainerManager {
    pub(super) root: PathBuf,
    pub(super) images: Arc<ImageManager>,
    pub(super) sandboxes: Arc<SandboxManager>,
    pub(super) inner: Mutex<(HashMap<String, ContainerRecord>, HashMap<String, String>)>,
    pub(super) locks: KeyedLocks,
    /// SIGKILL deadlines of the stops under way, by container id: a second
    /// StopContainer with a shorter timeout brings its stop's forward.
    pub(super) kill_at: std::sync::Mutex<HashMap<String, std::time::Instant>>,
    pub(super) events: Emitter,
    pub(super) exits: super::exit_watch::ExitWatch,
    pub(super) cpu_samples: super::cpu_samples::CpuSamples,
    /// The NRI plugins that adjust each new container (`nri_view.rs`).
    pub(super) nri: std::sync::OnceLock<Arc<crate::nri::Nri>>,
    pub(super) layer_usage: super::layer_usage::LayerUsage,
    /// Where CDI specs are read, lowest priority first (`cdi/`).
    /// CDI spec dirs (changed by a reload).
    pub(super) cdi_dirs: std::sync::RwLock<Vec<PathBuf>>,
    /// The node's block I/O classes (`[cgroup] blockio_config_file`).
    pub(super) blockio_config: std::sync::RwLock<PathBuf>,
    /// Containers whose runtime is creating them (not yet recorded): a
    /// shim v2 runtime asks for a container's image during its create.
    pub(super) creating: std::sync::Mutex<HashMap<String, ContainerRecord>>,
}

pub(super) fn err(e: impl std::fmt::Display) -> SandboxError {
    SandboxError::Shim(e.to_string())
}

pub(crate) fn shim_call(
    dir: &Path,
    request: Request,
) -> Result<crate::api::shim::ShimResponse, SandboxError> {
    let resp = client::call(
        dir,
        &ShimRequest {
            request: Some(request),
            ..Default::default()
        },
        Duration::from_secs(60),
    )
    .map_err(|e| SandboxError::Shim(format!("{}: {e}", dir.display())))?;
    crate::sandbox::shim_call::answer(resp)
}

impl ContainerManager {
    pub fn open(
        root: &Path,
        images: Arc<ImageManager>,
        sandboxes: Arc<SandboxManager>,
        events: Emitter,
    ) -> Result<ContainerManager, SandboxError> {
        let dir = root.join("containers");
        std::fs::create_dir_all(&dir).map_err(SandboxError::io("create containers dir"))?;
        let mut recs = HashMap::new();
        let mut names = HashMap::new();
        let mut unfinished = Vec::new();
        for ent in std::fs::read_dir(&dir)
            .map_err(SandboxError::io("list containers"))?
            .flatten()
        {
            match atomic::read_json::<ContainerRecord>(&ent.path().join("container.json")) {
                Ok(Some(r)) => {
                    names.insert(r.reserved_name(&r.sandbox_id), r.id.clone());
                    recs.insert(r.id.clone(), r);
                }
                // Never finished: undone below, once the manager exists.
                _ => unfinished.push(ent.path()),
            }
        }
        let m = ContainerManager {
            root: root.to_path_buf(),
            images,
            sandboxes,
            inner: Mutex::new((recs, names)),
            locks: KeyedLocks::default(),
            kill_at: std::sync::Mutex::new(HashMap::new()),
            events,
            exits: super::exit_watch::ExitWatch::new(),
            cpu_samples: Default::default(),
            nri: Default::default(),
            layer_usage: Default::default(),
            cdi_dirs: std::sync::RwLock::new(crate::config::CdiConfig::default().spec_dirs),
            blockio_config: std::sync::RwLock::default(),
            creating: std::sync::Mutex::default(),
        };
        for dir in unfinished {
            let id = dir
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            let pod = std::fs::read_to_string(dir.join(super::record::SANDBOX_FILE)).ok();
            tracing::warn!(container_id = %id, "undoing an unfinished container");
            m.discard(pod.as_deref(), &id);
        }
        Ok(m)
    }

    pub(super) fn dir(&self, id: &str) -> PathBuf {
        self.root.join("containers").join(id)
    }

    pub(super) fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, (HashMap<String, ContainerRecord>, HashMap<String, String>)>
    {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn save(&self, r: &ContainerRecord) -> Result<(), SandboxError> {
        atomic::write_state_json(&self.dir(&r.id).join("container.json"), r)
            .map_err(SandboxError::io("write container record"))?;
        self.lock().0.insert(r.id.clone(), r.clone());
        Ok(())
    }

    pub fn resolve(&self, id: &str) -> Option<String> {
        let g = self.lock();
        if g.0.contains_key(id) {
            return Some(id.to_string());
        }
        let mut m = g.0.keys().filter(|k| !id.is_empty() && k.starts_with(id));
        match (m.next(), m.next()) {
            (Some(k), None) => Some(k.clone()),
            _ => None,
        }
    }

    /// The CRI config the container was created from.
    pub fn saved_config(&self, id: &str) -> Option<ContainerConfig> {
        std::fs::read(self.dir(id).join("config.pb"))
            .ok()
            .and_then(|b| ContainerConfig::decode(b.as_slice()).ok())
    }

    /// A container by id, or one its runtime is creating now.
    pub fn get_or_creating(&self, id: &str) -> Option<ContainerRecord> {
        self.get(id).or_else(|| {
            self.creating
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(id)
                .cloned()
        })
    }

    pub fn get(&self, id: &str) -> Option<ContainerRecord> {
        self.lock().0.get(id).cloned()
    }

    /// The record brought up to date with the shim (exit code, times, OOM).
    pub fn refresh(&self, id: &str) -> Option<ContainerRecord> {
        let mut r = self.get(id)?;
        if r.state != ContainerState::Running && r.state != ContainerState::Unknown {
            return Some(r);
        }
        let shim_dir = self.sandboxes.shim_dir(&r.sandbox_id);
        let st = shim_call(
            &shim_dir,
            Request::State(StateRequest { id: id.to_string() }),
        )
        .ok()
        .and_then(|s| s.state);
        let exit: Option<(i32, i64, u64)> = match &st {
            Some(s) if s.status == "stopped" => Some((s.exit_code, s.exited_at, s.oom_kills)),
            Some(_) => None,
            None => atomic::read_json::<crate::shim::ExitRecord>(
                &shim_dir.join("exits").join(format!("{id}.json")),
            )
            .ok()
            .flatten()
            .map(|e| (e.exit_code, e.exited_at, e.oom_kills)),
        };
        match (exit, st) {
            (Some((code, at, oom_seen)), _) => {
                r.state = ContainerState::Exited;
                r.exit_code = code;
                r.finished_at = at.max(r.started_at);
                r.reason = if oom_seen > 0 || self.oom_killed(&r) {
                    "OOMKilled".into()
                } else if code == 0 {
                    "Completed".into()
                } else {
                    "Error".into()
                };
                return Some(self.record_exit(r));
            }
            (None, None) => {
                r.state = ContainerState::Unknown;
                r.reason = "Unknown".into();
                r.message = "the pod's shim is gone and recorded no exit".into();
            }
            _ => {}
        }
        Some(r)
    }

    /// Whether the kernel's OOM killer killed anything in the container's
    /// cgroup: its own limit or its pod's (the counts are hierarchical), the
    /// init or an exec. The shim's count (`shim/oom.rs`) covers a cgroup
    /// that is gone by now.
    fn oom_killed(&self, r: &ContainerRecord) -> bool {
        crate::cgroup::oom_kills(crate::cgroup::Layout::host(), &r.cgroups_path)
            .is_some_and(|n| n > 0)
    }

    /// Reads CDI specs from `dirs` (lowest priority first).
    /// Resolves CDI devices against `dirs` from now on.
    pub fn set_cdi_dirs(&self, dirs: Vec<PathBuf>) {
        *self.cdi_dirs.write().unwrap_or_else(|p| p.into_inner()) = dirs;
    }

    pub fn with_cdi_dirs(self, dirs: Vec<PathBuf>) -> Self {
        self.set_cdi_dirs(dirs);
        self
    }

    /// Resolves block I/O classes from `file` from now on.
    pub fn set_blockio_config(&self, file: PathBuf) {
        *self
            .blockio_config
            .write()
            .unwrap_or_else(|p| p.into_inner()) = file;
    }

    /// A container that mounts image `image_id` as a volume, if any.
    pub fn volume_user(&self, image_id: &str) -> Option<String> {
        self.lock()
            .0
            .values()
            .find(|r| r.image_volumes.iter().any(|i| i == image_id))
            .map(|r| r.id.clone())
    }

    /// Every container's id, in no order.
    pub fn ids(&self) -> Vec<String> {
        self.lock().0.keys().cloned().collect()
    }

    ///
    /// With the exit watch on (`exits.rs`), a running container's record
    /// learns of its exit as the shim records it, so the list asks no shim
    /// about it: it only checks, once per pod, that the pod's exits are
    /// watched and its shim is alive, and refreshes the containers of a pod
    /// whose shim is gone or whose exits the kernel would not watch (and
    /// those in state Unknown). The kubelet lists every second: its cost must not grow
    /// by a shim round trip per container.
    pub fn list(&self) -> Vec<ContainerRecord> {
        self.list_where(|_| true)
    }

    /// `list` of the records `pre` accepts as recorded (a filter on what
    /// a refresh does not change: id, pod, labels), so a list for one pod
    /// costs what it returns, not the node's every container.
    pub fn list_where(&self, pre: impl Fn(&ContainerRecord) -> bool) -> Vec<ContainerRecord> {
        let recs: Vec<ContainerRecord> =
            self.lock().0.values().filter(|r| pre(r)).cloned().collect();
        let mut pod_current: HashMap<String, bool> = HashMap::new();
        let mut v: Vec<ContainerRecord> = recs
            .into_iter()
            .filter_map(|r| {
                let current = match r.state {
                    ContainerState::Running => {
                        *pod_current.entry(r.sandbox_id.clone()).or_insert_with(|| {
                            let shim = self.sandboxes.shim_dir(&r.sandbox_id);
                            self.exits.covers(&shim.join("exits")) && client::pid(&shim).is_some()
                        })
                    }
                    ContainerState::Unknown => false,
                    _ => true,
                };
                if current {
                    Some(r)
                } else {
                    self.refresh(&r.id)
                }
            })
            .collect();
        v.sort_by_key(|r| r.created_at);
        v
    }

    /// Ids of the containers of a pod.
    pub fn of_sandbox(&self, sandbox_id: &str) -> Vec<String> {
        self.lock()
            .0
            .values()
            .filter(|r| r.sandbox_id == sandbox_id)
            .map(|r| r.id.clone())
            .collect()
    }
}
