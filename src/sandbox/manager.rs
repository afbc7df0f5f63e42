//! `SandboxManager`: RunPodSandbox, Stop, Remove, Status, List, and
//! recovery of sandbox records at start.
//!
//! Locking: the record map is a short-held std lock; each sandbox has an
//! async lock held across its own (blocking) lifecycle steps, never a global
//! one across CNI execs or shim calls.

use super::SandboxError;
use crate::api::cri::PodSandboxConfig;
use crate::api::shim::{shim_request::Request, StateRequest};
use crate::image::manager::KeyedLocks;
use crate::image::ImageManager;
use crate::network::cni::{Attachment, Cni};
use crate::shim::client;
use crate::store::atomic;
use prost::Message;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::shim_call::shim_call;

pub const RECORD_VERSION: u32 = 1;

/// What the sandbox manager needs from the config.
#[derive(Debug, Clone)]
pub struct SandboxPaths {
    pub root: PathBuf,
    pub state: PathBuf,
    pub cni_conf_dir: PathBuf,
    pub cni_bin_dirs: Vec<PathBuf>,
    /// How long a CNI plugin may run.
    pub cni_timeout: Duration,
    /// The pause image (changed by a reload).
    pub sandbox_image: Arc<std::sync::RwLock<String>>,
    /// The husk binary, run as `husk shim`.
    pub exe: PathBuf,
    /// The runtime handlers pods may name (changed by a reload).
    pub handlers: Arc<super::handlers::Live>,
    /// Whether no RPC is in flight and none has ended for a while (the
    /// server's idleness): spare shims are made only then.
    pub quiet_for: fn(Duration) -> bool,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "lowercase")]
pub enum SandboxState {
    Ready,
    NotReady,
}

/// A sandbox as recorded on disk.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SandboxRecord {
    pub version: u32,
    pub id: String,
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub attempt: u32,
    pub state: SandboxState,
    pub created_at: i64,
    pub ips: Vec<String>,
    pub netns: Option<PathBuf>,
    pub ipcns: Option<PathBuf>,
    pub utsns: Option<PathBuf>,
    pub shm: Option<PathBuf>,
    pub network_mode: i32,
    pub pid_mode: i32,
    pub ipc_mode: i32,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub runtime_handler: String,
    pub cni_conf: Option<PathBuf>,
    /// 0: the pod has no pause (`pause.rs`: its containers share no PID
    /// namespace).
    pub pause_pid: i32,
    pub hostname: String,
    pub log_directory: String,
    pub cgroups_path: String,
    /// The pod's cgroup parent as the kubelet gave it ("": none, the
    /// pause's cgroup sits under husk's default parent).
    #[serde(default)]
    pub cgroup_parent: String,
    /// Set once StopPodSandbox has completed (pause killed, CNI DEL done,
    /// shm released): a later stop, or the stop inside RemovePodSandbox,
    /// has nothing left to do.
    #[serde(default)]
    pub stopped: bool,
    /// The pod's own user namespace (hostUsers: false); None: the node's.
    #[serde(default)]
    pub userns: Option<super::userns::PodUserns>,
    /// The pod's mounts live in its monitor's mount namespace
    /// (`podns`): its pins are recorded as the server reaches them there.
    #[serde(default)]
    pub own_mount_ns: bool,
}

impl SandboxRecord {
    /// Whether the pod has a pause process.
    pub fn has_pause(&self) -> bool {
        self.pause_pid > 0
    }

    /// The kubelet's reserved name: name_namespace_uid_attempt.
    pub fn reserved_name(&self) -> String {
        format!(
            "{}_{}_{}_{}",
            self.name, self.namespace, self.uid, self.attempt
        )
    }
}

#[derive(Default)]
pub(super) struct Inner {
    pub(super) records: HashMap<String, SandboxRecord>,
    pub(super) names: HashMap<String, String>,
}

pub struct SandboxManager {
    pub(super) paths: SandboxPaths,
    pub(super) images: Arc<ImageManager>,
    pub(super) inner: Mutex<Inner>,
    pub(super) locks: KeyedLocks,
    pub(super) spare: Arc<super::spare::Spare>,
}

/// The pod cgroup parent of a config (husk's default when unset).
pub fn cgroup_parent(c: &crate::api::cri::PodSandboxConfig) -> String {
    c.linux
        .as_ref()
        .map(|l| l.cgroup_parent.clone())
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| crate::cgroup::Driver::current().default_parent().into())
}

impl SandboxManager {
    /// Opens the manager and reconciles records with reality.
    pub fn open(
        paths: SandboxPaths,
        images: Arc<ImageManager>,
    ) -> Result<SandboxManager, SandboxError> {
        let dir = paths.root.join("sandboxes");
        std::fs::create_dir_all(&dir).map_err(SandboxError::io("create sandboxes dir"))?;
        let mut inner = Inner::default();
        for ent in std::fs::read_dir(&dir)
            .map_err(SandboxError::io("list sandboxes"))?
            .flatten()
        {
            let path = ent.path().join("sandbox.json");
            let rec: SandboxRecord = match atomic::read_json(&path) {
                Ok(Some(r)) => r,
                // Never finished (a crash inside RunPodSandbox): undone
                // below, with the other unrecorded remnants.
                Ok(None) => continue,
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "unreadable sandbox record");
                    continue;
                }
            };
            inner.names.insert(rec.reserved_name(), rec.id.clone());
            inner.records.insert(rec.id.clone(), rec);
        }
        let spare = super::spare::Spare::new(&paths.state, &paths.exe, paths.quiet_for);
        let m = SandboxManager {
            paths,
            images,
            inner: Mutex::new(inner),
            locks: KeyedLocks::default(),
            spare,
        };
        // CNI results whose write a crash interrupted.
        let _ = atomic::remove_stale_temps(&m.paths.root.join("cni-cache"));
        for id in m.unrecorded() {
            m.discard(&id);
        }
        let ids: Vec<String> = m.lock_inner().records.keys().cloned().collect();
        for id in ids {
            m.refresh(&id);
        }
        m.spare.refill();
        Ok(m)
    }

    /// Removes what the server keeps ahead for the next pod (it is
    /// stopping).
    pub fn close(&self) {
        self.spare.clear();
    }

    pub(super) fn lock_inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The runtime handlers pods may name now.
    pub fn handlers(&self) -> Arc<super::handlers::Handlers> {
        self.paths.handlers.current()
    }

    /// The pause image now.
    pub fn sandbox_image(&self) -> String {
        self.paths
            .sandbox_image
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn sandbox_dir(&self, id: &str) -> PathBuf {
        self.paths.root.join("sandboxes").join(id)
    }

    pub fn shim_dir(&self, id: &str) -> PathBuf {
        self.paths.state.join("s").join(id)
    }

    pub(super) fn write_record(&self, rec: &SandboxRecord) -> Result<(), SandboxError> {
        atomic::write_state_json(&self.sandbox_dir(&rec.id).join("sandbox.json"), rec)
            .map_err(SandboxError::io(format!("write sandbox record {}", rec.id)))?;
        self.lock_inner()
            .records
            .insert(rec.id.clone(), rec.clone());
        Ok(())
    }

    /// A READY sandbox whose pause process is gone, or without a pause
    /// whose shim is gone, becomes NOTREADY.
    fn refresh(&self, id: &str) {
        let Some(mut rec) = self.get(id) else { return };
        if rec.state != SandboxState::Ready {
            return;
        }
        let alive = if rec.has_pause() {
            match shim_call(
                &self.shim_dir(id),
                Request::State(StateRequest { id: id.to_string() }),
            ) {
                Ok(r) => r.state.map(|s| s.status == "running").unwrap_or(false),
                Err(_) => false,
            }
        } else {
            client::pid(&self.shim_dir(id)).is_some()
        };
        if !alive {
            rec.state = SandboxState::NotReady;
            let _ = self.write_record(&rec);
        }
    }

    /// Ids of every recorded sandbox, as recorded (no shim calls).
    pub fn list_ids(&self) -> Vec<String> {
        self.lock_inner().records.keys().cloned().collect()
    }

    pub fn get(&self, id: &str) -> Option<SandboxRecord> {
        self.lock_inner().records.get(id).cloned()
    }

    /// Resolves a full id or a unique prefix.
    pub fn resolve(&self, id: &str) -> Option<String> {
        let inner = self.lock_inner();
        if inner.records.contains_key(id) {
            return Some(id.to_string());
        }
        let mut m = inner
            .records
            .keys()
            .filter(|k| !id.is_empty() && k.starts_with(id));
        match (m.next(), m.next()) {
            (Some(k), None) => Some(k.clone()),
            _ => None,
        }
    }

    pub fn list(&self) -> Vec<SandboxRecord> {
        self.list_where(|_| true)
    }

    /// `list` of the records `pre` accepts as recorded (id, labels: what
    /// a refresh does not change), refreshing only those.
    pub fn list_where(&self, pre: impl Fn(&SandboxRecord) -> bool) -> Vec<SandboxRecord> {
        let ids: Vec<String> = self
            .lock_inner()
            .records
            .values()
            .filter(|r| pre(r))
            .map(|r| r.id.clone())
            .collect();
        for id in &ids {
            self.refresh(id);
        }
        let inner = self.lock_inner();
        let mut v: Vec<SandboxRecord> = ids
            .iter()
            .filter_map(|id| inner.records.get(id).cloned())
            .collect();
        v.sort_by_key(|r| r.created_at);
        v
    }

    pub(super) fn cni(&self) -> Cni {
        Cni {
            timeout: self.paths.cni_timeout,
            bin_dirs: self.paths.cni_bin_dirs.clone(),
            cache_dir: self.paths.root.join("cni-cache"),
        }
    }

    pub(super) fn attachment(
        &self,
        id: &str,
        netns: &Path,
        md: &crate::api::cri::PodSandboxMetadata,
        c: &PodSandboxConfig,
    ) -> Attachment {
        let mut att = Attachment::for_pod(id, netns, &md.namespace, &md.name, &md.uid);
        let ports: Vec<serde_json::Value> = c
            .port_mappings
            .iter()
            .filter(|p| p.host_port > 0)
            .map(|p| {
                let proto = match crate::api::cri::Protocol::try_from(p.protocol) {
                    Ok(crate::api::cri::Protocol::Udp) => "udp",
                    Ok(crate::api::cri::Protocol::Sctp) => "sctp",
                    _ => "tcp",
                };
                let mut m = serde_json::json!({"hostPort": p.host_port, "containerPort": p.container_port, "protocol": proto});
                if !p.host_ip.is_empty() {
                    m["hostIP"] = serde_json::json!(p.host_ip);
                }
                m
            })
            .collect();
        if !ports.is_empty() {
            att.capability_args
                .insert("portMappings".into(), serde_json::Value::Array(ports));
        }
        if let Some(r) = crate::network::pod_cidr::ip_ranges(&self.paths.root) {
            att.capability_args.insert("ipRanges".into(), r);
        }
        if let Some(d) = &c.dns_config {
            att.capability_args.insert("dns".into(), serde_json::json!({"servers": d.servers, "searches": d.searches, "options": d.options}));
        }
        att
    }

    pub fn saved_config(&self, id: &str) -> PodSandboxConfig {
        std::fs::read(self.sandbox_dir(id).join("config.pb"))
            .ok()
            .and_then(|b| PodSandboxConfig::decode(b.as_slice()).ok())
            .unwrap_or_default()
    }
}
