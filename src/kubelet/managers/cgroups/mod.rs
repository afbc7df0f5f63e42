//! The kubelet's cgroups (its containerManager), with the cgroupfs driver
//! on v1 and v2 and the systemd driver on v2:
//!
//! ```text
//! <cgroup_root>                 node allocatable (pods enforced) or capacity shares
//! ├── pod<uid>                  Guaranteed pods
//! ├── burstable                 shares of its pods' requests
//! │   └── pod<uid>              requests → shares; limits → quota, memory
//! └── besteffort                minimum shares
//!     └── pod<uid>
//! ```
//!
//! The node's cgroups are made at start ([`PodCgroups::ensure_node`]); a
//! pod's before its sandbox ([`PodCgroups::ensure_pod`], again whenever
//! its limits would change), and the QoS cgroups follow the pods. The
//! runtime makes the containers' cgroups beneath and removes only those:
//! the pod cgroups are removed here, rmdir of empty directories, deepest
//! first, in every mounted hierarchy; a non-empty cgroup is left alone.
//! What is written is computed in `config`, and written by `fs`; on the
//! systemd driver each of these cgroups is a slice unit (`systemd`), the
//! same tree named `kubepods.slice`, `kubepods-burstable.slice`,
//! `kubepods-burstable-pod<uid>.slice`, made, limited and stopped by
//! systemd.

pub mod config;
pub mod fs;
pub mod systemd;

use crate::cgroup::Layout;
use crate::kubelet::kit::defaults;
use crate::kubelet::kit::node_config::{Capacity, Reservation};
use crate::kubelet::kit::settings::Settings;
use crate::kubelet::spec::sandbox_config;
use config::ResourceConfig;
pub use fs::CgroupError;
use k8s_openapi::api::core::v1::Pod;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Who makes the cgroups.
enum Backend {
    Fs(&'static Layout),
    Systemd(systemd::Slices),
}

impl Backend {
    fn apply(&self, path: &str, r: &ResourceConfig) -> Result<(), CgroupError> {
        match self {
            Backend::Fs(l) => fs::apply(l, path, r),
            Backend::Systemd(s) => s.apply(path, r),
        }
    }

    fn exists(&self, path: &str) -> bool {
        match self {
            Backend::Fs(l) => fs::exists(l, path),
            Backend::Systemd(s) => s.exists(path),
        }
    }
}

/// The pod and QoS cgroups of this kubelet.
pub struct PodCgroups {
    root: String,
    backend: Backend,
    /// Per pod: its QoS path, CPU request (millicores) and what was applied.
    pods: Mutex<HashMap<String, (String, i64, ResourceConfig)>>,
    /// Held from the sum of the burstable requests to its write, so that
    /// pod workers racing cannot leave an older sum written last.
    burstable: Mutex<()>,
}

impl PodCgroups {
    /// The cgroups of `s`'s driver; the systemd driver needs cgroup v2
    /// and systemd reachable over D-Bus, and says so when either is not.
    pub fn new(s: &Settings) -> Result<PodCgroups, String> {
        let backend = if s.systemd_cgroups {
            if !Layout::host().is_v2() {
                return Err("--cgroup-driver systemd needs a cgroup v2 host, and this one is v1: use --cgroup-driver cgroupfs (and husk serve's [cgroup] driver = \"cgroupfs\")".into());
            }
            let slices = systemd::Slices::connect().map_err(|e| {
                format!("--cgroup-driver systemd: systemd is not reachable over D-Bus: {e}; start systemd's D-Bus, or use --cgroup-driver cgroupfs")
            })?;
            Backend::Systemd(slices)
        } else {
            Backend::Fs(Layout::host())
        };
        Ok(PodCgroups {
            root: s.cgroup_root.trim_end_matches('/').to_string(),
            backend,
            pods: Mutex::new(HashMap::new()),
            burstable: Mutex::new(()),
        })
    }

    fn enabled(&self) -> bool {
        !self.root.is_empty()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (String, i64, ResourceConfig)>> {
        self.pods.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes `<root>`, `burstable` and `besteffort` with node allocatable
    /// (or capacity) on the root, and bounds the reserved cgroups that
    /// `--enforce-node-allocatable` names.
    pub fn ensure_node(&self, s: &Settings, cap: &Capacity) -> Result<(), CgroupError> {
        let reserved = s.kube_reserved.plus(&s.system_reserved);
        let enforce = |k: &str| s.enforce_node_allocatable.iter().any(|e| e == k);
        for (key, cgroup, r) in [
            ("kube-reserved", &s.kube_reserved_cgroup, &s.kube_reserved),
            (
                "system-reserved",
                &s.system_reserved_cgroup,
                &s.system_reserved,
            ),
        ] {
            if !enforce(key) {
                continue;
            }
            let Some(path) = cgroup else { continue };
            self.backend.apply(path, &reserved_config(r))?;
        }
        if !self.enabled() {
            return Ok(());
        }
        let root = if enforce("pods") {
            ResourceConfig {
                cpu_shares: Some(config::shares(cap.cpu_milli - reserved.cpu_milli)),
                cpu_quota: None,
                memory: Some(if reserved.memory > 0 {
                    cap.memory - reserved.memory
                } else {
                    -1
                }),
                pids: (reserved.pids > 0).then_some(cap.pids - reserved.pids),
            }
        } else {
            ResourceConfig {
                cpu_shares: Some(config::shares(cap.cpu_milli)),
                ..Default::default()
            }
        };
        self.backend.apply(&self.root, &root)?;
        let min = ResourceConfig {
            cpu_shares: Some(config::MIN_SHARES),
            ..Default::default()
        };
        self.backend
            .apply(&format!("{}/besteffort", self.root), &min)?;
        self.backend
            .apply(&format!("{}/burstable", self.root), &min)?;
        self.update_burstable()
    }

    /// Makes the pod's cgroup with its limits (when missing or when they
    /// changed) and updates the burstable shares.
    pub fn ensure_pod(&self, s: &Settings, pod: &Pod) -> Result<(), CgroupError> {
        if !self.enabled() {
            return Ok(());
        }
        let uid = defaults::uid(pod).to_string();
        let path = sandbox_config::cgroup_path(s, pod);
        let r = config::for_pod(pod, s.pod_max_pids);
        let request = config::totals(pod).cpu_request_milli;
        let known = self.lock().get(&uid).cloned();
        if known
            .as_ref()
            .is_some_and(|(p, _, a)| *p == path && *a == r)
            && self.backend.exists(&path)
        {
            return Ok(());
        }
        self.backend.apply(&path, &r)?;
        tracing::debug!(pod = %defaults::full_name(pod), cgroup = %path, ?r, "pod cgroup applied");
        let burstable = defaults::qos_class(pod) == "Burstable";
        self.lock()
            .insert(uid, (path, if burstable { request } else { 0 }, r));
        self.update_burstable()
    }

    /// `burstable`'s shares: its pods' CPU requests together.
    fn update_burstable(&self) -> Result<(), CgroupError> {
        let _one_at_a_time = self.burstable.lock().unwrap_or_else(|e| e.into_inner());
        let total: i64 = self.lock().values().map(|(_, req, _)| *req).sum();
        self.backend.apply(
            &format!("{}/burstable", self.root),
            &ResourceConfig {
                cpu_shares: Some(config::shares(total)),
                ..Default::default()
            },
        )
    }

    /// Removes the pod's cgroup (whatever its QoS class was) if empty.
    pub fn remove_pod(&self, uid: &str) {
        if !self.enabled() || uid.is_empty() {
            return;
        }
        let paths =
            ["", "/burstable", "/besteffort"].map(|qos| format!("{}{qos}/pod{uid}", self.root));
        match &self.backend {
            Backend::Systemd(slices) => {
                for path in paths.iter().filter(|p| slices.exists(p)) {
                    if let Err(e) = slices.remove(path) {
                        tracing::warn!(error = %e, "cannot stop the pod's slice");
                    }
                }
            }
            Backend::Fs(_) => {
                for h in hierarchies() {
                    for path in &paths {
                        let d = h.join(path.trim_start_matches('/'));
                        if d.exists() {
                            rmdir_tree(&d);
                        }
                    }
                }
            }
        }
        if self.lock().remove(uid).is_some() {
            if let Err(e) = self.update_burstable() {
                tracing::warn!(error = %e, "cannot update the burstable cgroup");
            }
        }
    }
}

fn reserved_config(r: &Reservation) -> ResourceConfig {
    ResourceConfig {
        cpu_shares: (r.cpu_milli > 0).then(|| config::shares(r.cpu_milli)),
        cpu_quota: None,
        memory: (r.memory > 0).then_some(r.memory),
        pids: (r.pids > 0).then_some(r.pids),
    }
}

fn hierarchies() -> Vec<PathBuf> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
    {
        let p = e.path();
        if p.is_dir() && !p.is_symlink() {
            v.push(p);
        }
    }
    // cgroup v2 only: the root itself is the hierarchy.
    if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        v.push(PathBuf::from("/sys/fs/cgroup"));
    }
    v
}

fn rmdir_tree(dir: &Path) {
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                rmdir_tree(&e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}
