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

use super::spec::{self, ImageDefaults, PodContext};
use super::{user, SpecError};
use crate::api::cri::{ContainerConfig, NamespaceMode};
use crate::api::shim::{
    shim_request::Request, CreateRequest, DeleteRequest, ShimRequest, StateRequest,
};
use crate::events::{Emitter, Kind};
use crate::image::manager::{now_ns, KeyedLocks};
use crate::image::ImageManager;
use crate::sandbox::manager::SandboxState;
use crate::sandbox::{SandboxError, SandboxManager};
use crate::shim::client;
use crate::store::atomic;
use prost::Message;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const RECORD_VERSION: u32 = 1;

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "lowercase")]
pub enum ContainerState {
    Created,
    Running,
    Exited,
    Unknown,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ContainerRecord {
    pub version: u32,
    pub id: String,
    pub sandbox_id: String,
    pub name: String,
    pub attempt: u32,
    pub image: String,
    pub image_ref: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub log_path: String,
    pub created_at: i64,
    pub started_at: i64,
    pub finished_at: i64,
    pub exit_code: i32,
    pub state: ContainerState,
    pub reason: String,
    pub message: String,
    pub cgroups_path: String,
    pub stop_signal: i32,
    /// The identity of the first process (absent in records written
    /// before it was kept).
    #[serde(default)]
    pub user: Option<super::user::RecordUser>,
}

impl ContainerRecord {
    pub(super) fn reserved_name(&self, pod: &str) -> String {
        format!("{}_{}_{}", self.name, pod, self.attempt)
    }
}

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
    pub(super) exits: super::exits::ExitWatch,
    pub(super) cpu_samples: super::stats::CpuSamples,
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
        },
        Duration::from_secs(60),
    )
    .map_err(|e| SandboxError::Shim(format!("{}: {e}", dir.display())))?;
    if resp.error.is_empty() {
        Ok(resp)
    } else {
        Err(SandboxError::Shim(resp.error))
    }
}

/// A signal name or number from an image's StopSignal.
pub fn parse_signal(s: &str) -> Option<i32> {
    if let Ok(n) = s.parse::<i32>() {
        return Some(n);
    }
    let name = s.trim_start_matches("SIG");
    Some(match name {
        "HUP" => libc::SIGHUP,
        "INT" => libc::SIGINT,
        "QUIT" => libc::SIGQUIT,
        "KILL" => libc::SIGKILL,
        "USR1" => libc::SIGUSR1,
        "USR2" => libc::SIGUSR2,
        "TERM" => libc::SIGTERM,
        "WINCH" => libc::SIGWINCH,
        "STOP" => libc::SIGSTOP,
        "PWR" => libc::SIGPWR,
        _ => return None,
    })
}

/// Reads a file of the image through its rootfs, confined to it.
fn read_in_root(root: &Path, rel: &str) -> Option<String> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    let dir = rustix::fs::open(
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let fd = rustix::fs::openat2(
        &dir,
        rel,
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::IN_ROOT,
    )
    .ok()?;
    let mut s = String::new();
    std::io::Read::read_to_string(&mut std::fs::File::from(fd), &mut s).ok()?;
    Some(s)
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
            exits: super::exits::ExitWatch::new(),
            cpu_samples: Default::default(),
        };
        for dir in unfinished {
            let id = dir
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            let pod = std::fs::read_to_string(dir.join(super::recover::SANDBOX_FILE)).ok();
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

    fn save(&self, r: &ContainerRecord) -> Result<(), SandboxError> {
        atomic::write_json(&self.dir(&r.id).join("container.json"), r)
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

    /// CreateContainer.
    pub async fn create(
        self: &Arc<Self>,
        sandbox_id: &str,
        c: ContainerConfig,
    ) -> Result<String, SandboxError> {
        let pod = self
            .sandboxes
            .get(sandbox_id)
            .ok_or_else(|| SandboxError::NotFound(sandbox_id.to_string()))?;
        if pod.state != SandboxState::Ready {
            return Err(SandboxError::Invalid(format!(
                "pod sandbox {sandbox_id} is not ready"
            )));
        }
        let md = c
            .metadata
            .clone()
            .ok_or_else(|| SandboxError::Invalid("metadata is required".into()))?;
        if md.name.is_empty() {
            return Err(SandboxError::Invalid("metadata.name is required".into()));
        }
        let image_name = c
            .image
            .as_ref()
            .map(|i| i.image.clone())
            .unwrap_or_default();
        let image = self.images.find(&image_name).ok_or_else(|| {
            SandboxError::NotFound(format!("image {image_name:?} (pull it first)"))
        })?;
        let id = format!("{:032x}", rand::random::<u128>());
        let name = format!("{}_{}_{}", md.name, sandbox_id, md.attempt);
        {
            let mut g = self.lock();
            if let Some(existing) = g.1.get(&name) {
                return Err(SandboxError::NameReserved {
                    name,
                    id: existing.clone(),
                });
            }
            g.1.insert(name.clone(), id.clone());
        }
        let this = self.clone();
        let (id2, sid) = (id.clone(), sandbox_id.to_string());
        let r = tokio::task::spawn_blocking(move || this.create_blocking(&id2, &sid, &c, &image))
            .await
            .map_err(err)?;
        if r.is_err() {
            self.lock().1.remove(&name);
            self.discard(Some(sandbox_id), &id);
        }
        r.map(|_| id)
    }

    fn create_blocking(
        &self,
        id: &str,
        sandbox_id: &str,
        c: &ContainerConfig,
        image: &crate::image::ImageRecord,
    ) -> Result<(), SandboxError> {
        let pod = self
            .sandboxes
            .get(sandbox_id)
            .ok_or_else(|| SandboxError::NotFound(sandbox_id.to_string()))?;
        let dir = self.dir(id);
        std::fs::create_dir_all(&dir).map_err(SandboxError::io("create container dir"))?;
        // First, so an interrupted create can be undone (recover.rs).
        std::fs::write(dir.join(super::recover::SANDBOX_FILE), sandbox_id)
            .map_err(SandboxError::io("create container dir"))?;
        for d in ["rootfs", "upper", "work", "volumes"] {
            std::fs::create_dir_all(dir.join(d))
                .map_err(SandboxError::io("create container dir"))?;
        }
        std::fs::write(dir.join("config.pb"), c.encode_to_vec())
            .map_err(SandboxError::io("save container config"))?;
        let lower: Vec<String> = self
            .images
            .layer_dirs(image)?
            .iter()
            .rev()
            .map(|p| p.display().to_string())
            .collect();
        let lowerdir = if lower.len() == 1 {
            lower[0].clone()
        } else {
            lower.join(":")
        };
        let opts = format!(
            "lowerdir={lowerdir},upperdir={},workdir={}",
            dir.join("upper").display(),
            dir.join("work").display()
        );
        crate::sys::mount_overlay(&dir.join("rootfs"), &opts)
            .map_err(SandboxError::io("mount container rootfs"))?;

        // Mount points of the config's mounts, created inside the rootfs
        // (confined: an image symlink cannot send them to the host).
        for m in &c.mounts {
            let host = Path::new(&m.host_path);
            if !host.is_absolute() || !m.container_path.starts_with('/') {
                return Err(SandboxError::Invalid(format!(
                    "mount {:?} -> {:?}: both paths must be absolute",
                    m.host_path, m.container_path
                )));
            }
            // A missing host path becomes an empty directory, as containerd does.
            if !host.exists() {
                std::fs::create_dir_all(host).map_err(SandboxError::io(format!(
                    "create host path {}",
                    host.display()
                )))?;
            }
            if !host.is_dir() {
                continue;
            }
            crate::image::confined::mkdir_all_in_root(
                &dir.join("rootfs"),
                Path::new(&m.container_path),
            )?;
        }
        let cfg: crate::image::manifest::ImageConfig =
            serde_json::from_slice(&self.images.config_json(image)?)
                .map_err(|e| SandboxError::Invalid(format!("image config: {e}")))?;
        let d = cfg.config.unwrap_or_default();
        let mut volumes = Vec::new();
        for (i, v) in d.volumes.clone().unwrap_or_default().keys().enumerate() {
            let host = dir.join("volumes").join(i.to_string());
            std::fs::create_dir_all(&host).map_err(SandboxError::io("create volume"))?;
            volumes.push((v.clone(), host));
        }
        let img = ImageDefaults {
            entrypoint: d.entrypoint.clone().unwrap_or_default(),
            cmd: d.cmd.clone().unwrap_or_default(),
            env: d.env.clone().unwrap_or_default(),
            working_dir: d.working_dir.clone().unwrap_or_default(),
            volumes,
        };
        let sc = c
            .linux
            .as_ref()
            .and_then(|l| l.security_context.clone())
            .unwrap_or_default();
        let rootfs = dir.join("rootfs");
        let asked = user::Asked {
            run_as_user: sc.run_as_user.map(|u| u.value),
            run_as_username: &sc.run_as_username,
            run_as_group: sc.run_as_group.map(|g| g.value),
            supplemental: &sc.supplemental_groups,
            strict: sc.supplemental_groups_policy
                == crate::api::cri::SupplementalGroupsPolicy::Strict as i32,
        };
        let who = user::resolve(
            &asked,
            d.user.as_deref().unwrap_or(""),
            read_in_root(&rootfs, "etc/passwd").as_deref(),
            read_in_root(&rootfs, "etc/group").as_deref(),
        )
        .map_err(|SpecError(m)| SandboxError::Invalid(m))?;
        let parent =
            crate::sandbox::manager::cgroup_parent(&self.sandboxes.saved_config(sandbox_id));
        let cgroups_path = crate::cgroup::Driver::current().cgroups_path(&parent, id);
        let files = self.sandboxes.sandbox_dir(sandbox_id);
        let ctx = PodContext {
            netns: pod.netns.as_deref(),
            ipcns: pod.ipcns.as_deref(),
            utsns: pod.utsns.as_deref(),
            pause_pid: pod.pause_pid,
            files_dir: &files,
            shm: pod.shm.as_deref(),
            cgroups_path: &cgroups_path,
        };
        if NamespaceMode::try_from(sc.namespace_options.as_ref().map(|n| n.pid).unwrap_or(1))
            == Ok(NamespaceMode::Pod)
            && pod.pause_pid <= 0
        {
            return Err(SandboxError::Invalid(
                "the pod has no pause process to share a PID namespace with".into(),
            ));
        }
        super::mounts::check_recursive_read_only(c)
            .map_err(|SpecError(m)| SandboxError::Invalid(m))?;
        if c.mounts.iter().any(|m| m.propagation != 0) {
            let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
            super::mounts::check_propagation(c, &mountinfo)
                .map_err(|SpecError(m)| SandboxError::Invalid(m))?;
        }
        let mut c = c.clone();
        if let Some(res) = c.linux.as_mut().and_then(|l| l.resources.as_mut()) {
            crate::cgroup::resources::validate(res, crate::cgroup::Layout::host())?;
            crate::cgroup::prune_unsupported(crate::cgroup::Layout::host(), &cgroups_path, res);
        }
        let spec = spec::build(id, &c, &img, &who, &ctx)
            .map_err(|SpecError(m)| SandboxError::Invalid(m))?;
        atomic::write_json(&dir.join("config.json"), &spec)
            .map_err(SandboxError::io("write container spec"))?;
        let log_path = if c.log_path.is_empty() || pod.log_directory.is_empty() {
            String::new()
        } else {
            Path::new(&pod.log_directory)
                .join(&c.log_path)
                .display()
                .to_string()
        };
        let md = c.metadata.clone().unwrap_or_default();
        let rec = ContainerRecord {
            version: RECORD_VERSION,
            id: id.to_string(),
            sandbox_id: sandbox_id.to_string(),
            name: md.name.clone(),
            attempt: md.attempt,
            image: c
                .image
                .as_ref()
                .map(|i| i.image.clone())
                .unwrap_or_default(),
            image_ref: image.id.clone(),
            labels: c.labels.clone().into_iter().collect(),
            annotations: c.annotations.clone().into_iter().collect(),
            log_path: log_path.clone(),
            created_at: now_ns(),
            started_at: 0,
            finished_at: 0,
            exit_code: 0,
            state: ContainerState::Created,
            reason: String::new(),
            message: String::new(),
            user: Some(who.record()),
            cgroups_path: cgroups_path.clone(),
            stop_signal: d
                .stop_signal
                .as_deref()
                .and_then(parse_signal)
                .unwrap_or(libc::SIGTERM),
        };
        self.watch_pod_exits(sandbox_id);
        shim_call(
            &self.sandboxes.shim_dir(sandbox_id),
            Request::Create(CreateRequest {
                id: id.to_string(),
                bundle: dir.display().to_string(),
                log_path,
                stdin: c.stdin,
                stdin_once: c.stdin_once,
                tty: c.tty,
                ..Default::default()
            }),
        )?;
        let res = c.linux.as_ref().and_then(|l| l.resources.as_ref());
        let saved = crate::cgroup::systemd::write_leftovers(&cgroups_path, res)
            .map_err(SandboxError::from)
            .and_then(|()| self.save(&rec));
        if let Err(e) = saved {
            let _ = shim_call(
                &self.sandboxes.shim_dir(sandbox_id),
                Request::Delete(DeleteRequest {
                    id: id.to_string(),
                    force: true,
                }),
            );
            return Err(e);
        }
        self.events.emit(Kind::Created, id, sandbox_id);
        tracing::info!(container_id = %id, pod_sandbox_id = %sandbox_id, "container created");
        Ok(())
    }

    /// The CRI config the container was created from.
    pub fn saved_config(&self, id: &str) -> Option<ContainerConfig> {
        std::fs::read(self.dir(id).join("config.pb"))
            .ok()
            .and_then(|b| ContainerConfig::decode(b.as_slice()).ok())
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

    pub fn list(&self) -> Vec<ContainerRecord> {
        let ids: Vec<String> = self.lock().0.keys().cloned().collect();
        let mut v: Vec<ContainerRecord> = ids.iter().filter_map(|i| self.refresh(i)).collect();
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
