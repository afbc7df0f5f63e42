//! RunPodSandbox: the transactional create (each step pushes its undo;
//! a failure unwinds them in reverse), CNI ADD in parallel with the rest
//! (the pause of a pod that shares its PID namespace, `pause.rs`).

use super::spare::Taken;
use super::userns::{PodUserns, Userns};
use super::{files, validate, SandboxError};
use crate::api::cri::{NamespaceMode, PodSandboxConfig};
use crate::api::shim::{shim_request::Request, DeleteRequest, ShutdownRequest};
use crate::network::cni::{Attachment, Cni, NetworkList};
use crate::network::netns::{self, Kind as NsKind};
use crate::shim::client;
use prost::Message;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::manager::*;
use super::shim_call::{shim_call, wait_gone};
use super::undo::Undo;
use crate::sys::now_ns;

/// What a CNI ADD thread hands back: the result and what DEL needs.
type CniOutcome = (serde_json::Value, Cni, NetworkList, Attachment);
type CniJob = std::thread::JoinHandle<Result<CniOutcome, SandboxError>>;
type ShimJob = std::thread::JoinHandle<std::io::Result<()>>;

/// Whether husk's own path can run pods in user namespaces here.
fn userns_supported(root: &std::path::Path) -> bool {
    crate::idmap::Support::cached(root).pods()
}

/// A RunPodSandbox checked and its name reserved: what its task makes.
struct Reserved {
    name: String,
    id: String,
    config: PodSandboxConfig,
    runtime_handler: String,
    oci: Option<crate::api::shim::OciRuntime>,
    spec_annotations: Vec<(String, String)>,
    userns: Userns,
    /// Whether the pod has a pause (a shared PID namespace, or a shim
    /// runtime's sandbox task).
    pause: bool,
    steps: crate::timing::Stages,
}

/// What a RunPodSandbox asks for, checked, with the id it was given.
struct Asked<'a> {
    id: &'a str,
    c: &'a PodSandboxConfig,
    /// The pause image, for a pod that has a pause.
    image: Option<crate::image::ImageRecord>,
    runtime_handler: String,
    /// What the shim runs the pause with (None: husk's own path).
    oci: Option<crate::api::shim::OciRuntime>,
    /// The pod annotations its handler passes into OCI specs.
    spec_annotations: Vec<(String, String)>,
    userns: &'a Userns,
    /// The spare whose id is `id`, if the pod took one.
    spare: Option<Taken>,
    /// The RPC's stages so far.
    steps: crate::timing::Stages,
}

impl SandboxManager {
    /// RunPodSandbox.
    pub async fn run(
        self: &Arc<Self>,
        config: PodSandboxConfig,
        runtime_handler: String,
    ) -> Result<String, SandboxError> {
        let mut steps = crate::timing::Stages::new("RunPodSandbox");
        let userns = validate::config(&config).map_err(SandboxError::Invalid)?;
        let (net, pid, ipc) = validate::namespace_modes(&config);
        userns
            .check_modes(
                net == NamespaceMode::Node,
                pid == NamespaceMode::Node,
                ipc == NamespaceMode::Node,
            )
            .map_err(SandboxError::Invalid)?;
        let handlers = self.handlers();
        let handler = handlers.get(&runtime_handler)?;
        let oci = handler.oci_request()?;
        if oci.is_some()
            && matches!(userns, Userns::Pod { .. })
            && !handler
                .features(true, userns_supported(&self.paths.root))
                .user_namespaces
        {
            return Err(SandboxError::Invalid(format!(
                "runtime handler {:?} cannot run a pod in a user namespace: its runtime does \
                 not idmap mounts (its `features` lists no linux.mountExtensions.idmap)",
                handler.name
            )));
        }
        let spec_annotations = handler.pod_annotations(&config.annotations);
        let md = config.metadata.clone().unwrap_or_default();
        let name = format!("{}_{}_{}_{}", md.name, md.namespace, md.uid, md.attempt);
        // A place among the pods made at once, before the name is reserved.
        let place = super::gate::pod_place().await?;
        let id = format!("{:032x}", rand::random::<u128>());
        {
            let mut inner = self.lock_inner();
            if let Some(existing) = inner.names.get(&name) {
                return Err(SandboxError::NameReserved {
                    name,
                    id: existing.clone(),
                });
            }
            inner.names.insert(name.clone(), id.clone());
        }
        steps.end("validate");
        // From here the pod is made in a task of its own: a caller that
        // goes (the kubelet's deadline under a burst) leaves a pod made, or
        // one unwound with its name released, never a name reserved for
        // nothing.
        let shim = handler.is_shim();
        let this = self.clone();
        let reserved = Reserved {
            name,
            id,
            config,
            runtime_handler,
            oci,
            spec_annotations,
            userns,
            pause: pid == NamespaceMode::Pod || shim,
            steps,
        };
        crate::otel::spawn(async move {
            let _place = place;
            this.run_reserved(reserved).await
        })
        .await
        .map_err(|e| SandboxError::Shim(format!("run task: {e}")))?
    }

    /// The rest of a RunPodSandbox whose name is reserved.
    async fn run_reserved(self: Arc<Self>, r: Reserved) -> Result<String, SandboxError> {
        let Reserved {
            name,
            id,
            config,
            runtime_handler,
            oci,
            spec_annotations,
            userns,
            pause,
            mut steps,
        } = r;
        let release = |m: &SandboxManager| {
            m.lock_inner().names.remove(&name);
        };
        // Only a pod whose containers share a PID namespace has a pause.
        let sandbox_image = self.sandbox_image();
        // A shim runtime's pod has one too: its sandbox task, which Kata
        // makes the pod's VM of and the runc shim groups the pod by.
        let found = pause.then(|| self.images.find(&sandbox_image));
        steps.end("image");
        let image = match found {
            Some(Some(r)) => Ok(Some(r)),
            Some(None) => self
                .images
                .pull(&sandbox_image, &Default::default())
                .await
                .map(Some),
            None => Ok(None),
        };
        // Every pod has each stage (none when the image was there).
        steps.end_external("image pull");
        let image = match image {
            Ok(i) => i,
            Err(e) => {
                release(&self);
                return Err(e.into());
            }
        };
        // The spare's id becomes the pod's.
        let spare = self.spare.take();
        let id = match &spare {
            Some(t) => {
                self.lock_inner().names.insert(name.clone(), t.id.clone());
                t.id.clone()
            }
            None => id,
        };
        let _lock = self.locks.lock(&id).await;
        steps.end("spare");
        let this = self.clone();
        let id2 = id.clone();
        let created = crate::otel::spawn_blocking(move || {
            this.create(Asked {
                id: &id2,
                c: &config,
                image,
                runtime_handler,
                oci,
                spec_annotations,
                userns: &userns,
                spare,
                steps,
            })
        })
        .await
        .map_err(|e| SandboxError::Shim(format!("create task: {e}")));
        self.spare.refill();
        match created.and_then(|c| c) {
            Ok(rec) => {
                tracing::info!(pod_sandbox_id = %id, pod = %name, ips = ?rec.ips, "pod sandbox ready");
                Ok(id)
            }
            Err(e) => {
                release(&self);
                Err(e)
            }
        }
    }

    fn create(&self, asked: Asked<'_>) -> Result<SandboxRecord, SandboxError> {
        let mut undo = Undo::default();
        let id = asked.id;
        let r = self.create_steps(asked, &mut undo);
        match r {
            Ok(rec) => {
                undo.commit();
                Ok(rec)
            }
            Err(e) => {
                tracing::warn!(pod_sandbox_id = %id, error = %e, "RunPodSandbox failed; unwinding");
                undo.unwind();
                Err(e)
            }
        }
    }

    fn create_steps(
        &self,
        asked: Asked<'_>,
        undo: &mut Undo,
    ) -> Result<SandboxRecord, SandboxError> {
        let Asked {
            id,
            c,
            image,
            runtime_handler,
            oci,
            spec_annotations,
            userns,
            mut spare,
            mut steps,
        } = asked;
        steps.end("task");
        let md = c.metadata.clone().unwrap_or_default();
        let (net_mode, pid_mode, ipc_mode) = validate::namespace_modes(c);
        let host_net = net_mode == NamespaceMode::Node;
        let host_ipc = ipc_mode == NamespaceMode::Node;
        let dir = self.sandbox_dir(id);
        let shim_dir = self.shim_dir(id);
        crate::store::modes::make_private(&dir).map_err(SandboxError::io("create sandbox dir"))?;
        {
            let d = dir.clone();
            undo.push("sandbox dir", move || {
                let _ = std::fs::remove_dir_all(d);
            });
        }
        std::fs::write(dir.join("config.pb"), c.encode_to_vec())
            .map_err(SandboxError::io("save sandbox config"))?;
        steps.end("sandbox dir");

        // The shim starts on its own thread while the namespaces, bundle
        // and files are made; it is joined before the pause is created.
        // A spare's runs already.
        let shim_job: Arc<Mutex<Option<ShimJob>>> = if spare.is_some() {
            Arc::new(Mutex::new(None))
        } else {
            let (exe, d) = (self.paths.exe.clone(), shim_dir.clone());
            let h = std::thread::spawn(move || client::spawn(&exe, &d));
            Arc::new(Mutex::new(Some(h)))
        };
        {
            let (job, d, id) = (shim_job.clone(), shim_dir.clone(), id.to_string());
            undo.push("shim", move || {
                if let Some(h) = job.lock().unwrap_or_else(|p| p.into_inner()).take() {
                    let _ = h.join();
                }
                let _ = shim_call(&d, Request::Delete(DeleteRequest { id, force: true }));
                let _ = shim_call(&d, Request::Shutdown(ShutdownRequest::default()));
                wait_gone(&d, Duration::from_secs(5));
                let _ = std::fs::remove_dir_all(&d);
            });
        }

        // Namespaces, pinned.
        // No hostname asked for: the node's, as containerd gives.
        let hostname = if host_net || c.hostname.is_empty() {
            rustix::system::uname()
                .nodename()
                .to_string_lossy()
                .into_owned()
        } else {
            c.hostname.clone()
        };
        {
            let d = self.paths.state.join("ns").join(id);
            undo.push("namespace dir", move || {
                let _ = std::fs::remove_dir(d);
            });
        }
        let path = |kind| netns::pin_path(&self.paths.state, kind, id);
        let mut pins = Vec::new();
        if !host_net {
            pins.push((NsKind::Net, path(NsKind::Net)));
            pins.push((NsKind::Uts, path(NsKind::Uts)));
        }
        if !host_ipc {
            pins.push((NsKind::Ipc, path(NsKind::Ipc)));
        }
        // The spare's namespaces are of use to a pod with all three of its
        // own in the node's user namespace; another has them removed.
        if let Some(t) = spare.as_mut() {
            if pins.len() < 3 || !matches!(userns, Userns::Node) {
                self.spare.remove_namespaces(t);
            }
        }
        let mut pod_userns = match *userns {
            Userns::Node if spare.as_ref().is_some_and(|t| t.namespaces) => {
                netns::set_hostname(&path(NsKind::Uts), &hostname)
                    .map_err(SandboxError::io("set the host name"))?;
                None
            }
            Userns::Node => {
                netns::create_set(&pins, Some(&hostname), true)
                    .map_err(SandboxError::io("create the pod's namespaces"))?;
                None
            }
            Userns::Pod { uids, gids } => {
                let pin = super::userns::pin_path(&self.paths.state, id);
                crate::idmap::ns::create_pod(&pin, &pins, uids, gids, Some(&hostname), true)
                    .map_err(SandboxError::io("create the pod's user namespace"))?;
                let q = pin.clone();
                undo.push("user namespace pin", move || {
                    let _ = netns::remove(&q);
                });
                Some(PodUserns { pin, uids, gids })
            }
        };
        // The pod's dirs open to its own root alone, for search (`store::modes`).
        if let Some(root) = pod_userns.as_ref().map(PodUserns::root) {
            let pins_dir = self.paths.state.join("ns").join(id);
            for d in [dir.as_path(), pins_dir.as_path()] {
                crate::store::modes::for_pod(d, Some(root)).map_err(SandboxError::io(
                    "open the pod's dirs to its user namespace",
                ))?;
            }
        }
        for (_, p) in &pins {
            let q = p.clone();
            undo.push("namespace pin", move || {
                let _ = netns::remove(&q);
            });
        }
        let pinned = |kind| {
            pins.iter()
                .find(|(k, _)| *k == kind)
                .map(|(_, p)| p.clone())
        };
        let mut sysctls: Vec<(String, String)> = c
            .linux
            .as_ref()
            .map(|l| l.sysctls.clone().into_iter().collect())
            .unwrap_or_default();
        sysctls.sort();
        netns::set_sysctls(
            pinned(NsKind::Net).as_deref(),
            pinned(NsKind::Ipc).as_deref(),
            &sysctls,
        )
        .map_err(|e| SandboxError::Invalid(e.to_string()))?;
        // With `mount_namespace = "pod"` the pins go to the pod's monitor
        // (`podns`), once it runs; the pod is told them as the server
        // reaches them there.
        let monitor = if crate::shim::client::own_mount_ns() {
            join_shim(&shim_job)?;
            let pid = client::pid(&shim_dir)
                .and_then(|p| u32::try_from(p).ok())
                .ok_or_else(|| SandboxError::Shim("the pod's shim is not running".into()))?;
            let paths: Vec<PathBuf> = pins.iter().map(|(_, p)| p.clone()).collect();
            super::podns::adopt_pins(pid, &paths, pod_userns.as_mut())
                .map_err(SandboxError::io("hand the pod its namespaces"))?;
            Some(pid)
        } else {
            None
        };
        let seen = |p: PathBuf| match monitor {
            Some(pid) => super::podns::seen(pid, &p),
            None => p,
        };
        let (netns_path, utsns, ipcns) = (
            pinned(NsKind::Net).map(seen),
            pinned(NsKind::Uts).map(seen),
            pinned(NsKind::Ipc).map(seen),
        );
        steps.end("namespaces");
        // CNI ADD runs on its own thread while the rest is made (the
        // pause, if any, needs only the pinned netns). A failure anywhere
        // before the join still joins it and undoes the ADD.
        let cni_job: Arc<Mutex<Option<CniJob>>> = Arc::new(Mutex::new(None));
        if let Some(ns) = &netns_path {
            let net = NetworkList::load_first(&self.paths.cni_conf_dir)?.ok_or_else(|| {
                crate::network::cni::CniError::NoConfig(self.paths.cni_conf_dir.clone())
            })?;
            let cni = self.cni();
            let att = self.attachment(id, ns, &md, c);
            let handle = std::thread::spawn(crate::otel::carry(
                move || -> Result<CniOutcome, SandboxError> {
                    let result = cni.add(&net, &att)?;
                    Ok((result, cni, net, att))
                },
            ));
            *cni_job.lock().unwrap_or_else(|p| p.into_inner()) = Some(handle);
            let job = cni_job.clone();
            undo.push("pending cni", move || {
                let pending = job.lock().unwrap_or_else(|p| p.into_inner()).take();
                if let Some(Ok(Ok((_, cni, net, att)))) = pending.map(|h| h.join()) {
                    let _ = cni.del(&net, &att);
                }
            });
        }
        steps.end("cni config");
        // /dev/shm for the pod.
        let shm = if host_ipc {
            None
        } else {
            let p = dir.join("shm");
            std::fs::create_dir_all(&p).map_err(SandboxError::io("create shm dir"))?;
            // Owned by the pod's root in a pod user namespace.
            let (uid, gid) = pod_userns.as_ref().map(PodUserns::root).unwrap_or((0, 0));
            let opts = std::ffi::CString::new(format!("mode=1777,size=65536k,uid={uid},gid={gid}"))
                .map_err(|e| SandboxError::Invalid(e.to_string()))?;
            rustix::mount::mount(
                "shm",
                &p,
                "tmpfs",
                rustix::mount::MountFlags::NOSUID
                    | rustix::mount::MountFlags::NODEV
                    | rustix::mount::MountFlags::NOEXEC,
                opts.as_c_str(),
            )
            .map_err(|e| SandboxError::io("mount shm")(e.into()))?;
            let q = p.clone();
            undo.push("shm mount", move || {
                let _ = rustix::mount::unmount(&q, rustix::mount::UnmountFlags::DETACH);
            });
            if let Some(pid) = monitor {
                super::podns::adopt(pid, std::slice::from_ref(&p))
                    .map_err(SandboxError::io("hand the pod its shm"))?;
            }
            Some(p)
        };

        steps.end("shm");
        let cgroups_path = crate::cgroup::Driver::current().cgroups_path(&cgroup_parent(c), id);
        let mut spec_annotations = spec_annotations;
        if oci.as_ref().is_some_and(|o| o.shim.is_some()) {
            spec_annotations.extend(super::handlers::sandbox_annotations(id, c));
        }
        let bundle = match &image {
            Some(image) => Some(self.pause_bundle(
                &super::pause::PauseAsk {
                    c,
                    image,
                    dir: &dir,
                    userns: pod_userns.as_ref(),
                    monitor,
                    netns: netns_path.as_deref(),
                    ipcns: ipcns.as_deref(),
                    utsns: utsns.as_deref(),
                    shm: shm.as_deref(),
                    cgroups_path: &cgroups_path,
                    annotations: &spec_annotations,
                },
                undo,
                &mut steps,
            )?),
            None => None,
        };
        if let (Some(pid), Some(b)) = (monitor, &bundle) {
            super::podns::adopt(pid, &[b.join("rootfs")])
                .map_err(SandboxError::io("hand the pod its pause's rootfs"))?;
        }
        steps.end("bundle");
        // The shim, then the pause container in it.
        join_shim(&shim_job)?;
        steps.end("shim");
        let mut pause_pid = 0;
        if let Some(bundle) = bundle {
            let started = shim_call(
                &shim_dir,
                Request::Create(crate::api::shim::CreateRequest {
                    id: id.to_string(),
                    bundle: bundle.display().to_string(),
                    start: true,
                    cgroups_path: cgroups_path.clone(),
                    oci: super::handlers::for_pod(oci.clone(), id),
                    ..Default::default()
                }),
            )?;
            let runtime = Duration::from_micros(started.runtime_us);
            steps.end_split("pause", "pause runtime", runtime);
            pause_pid = started.state.map(|s| s.pid).unwrap_or(0);
        }

        // Network: the CNI ADD started above, joined now.
        let mut ips = Vec::new();
        let mut cni_conf = None;
        let pending = cni_job.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(job) = pending {
            let (result, cni, net, att) = job
                .join()
                .map_err(|_| SandboxError::Shim("CNI thread panicked".into()))??;
            steps.end_external("cni wait");
            {
                let (cni, net, att) = (cni.clone(), net.clone(), att.clone());
                undo.push("cni", move || {
                    let _ = cni.del(&net, &att);
                });
            }
            ips = crate::network::cni::pod_ips(&result);
            cni_conf = Some(net.file.clone());
        }
        // Files the containers will share (none is the pause's), with the
        // pod's IP once it has one.
        files::write_all(
            &dir,
            c.dns_config.as_ref(),
            &hostname,
            ips.first().map(String::as_str),
            pod_userns.as_ref().map(PodUserns::root),
        )
        .map_err(SandboxError::io("write pod files"))?;
        steps.end("files");
        let rec = SandboxRecord {
            version: RECORD_VERSION,
            id: id.to_string(),
            name: md.name.clone(),
            namespace: md.namespace.clone(),
            uid: md.uid.clone(),
            attempt: md.attempt,
            state: SandboxState::Ready,
            created_at: now_ns(),
            ips,
            netns: netns_path,
            ipcns,
            utsns,
            shm,
            network_mode: net_mode as i32,
            pid_mode: pid_mode as i32,
            ipc_mode: ipc_mode as i32,
            labels: c.labels.clone().into_iter().collect(),
            annotations: c.annotations.clone().into_iter().collect(),
            runtime_handler,
            cni_conf,
            pause_pid,
            hostname,
            log_directory: c.log_directory.clone(),
            cgroups_path,
            cgroup_parent: cgroup_parent(c),
            stopped: false,
            userns: pod_userns,
            own_mount_ns: monitor.is_some(),
        };
        self.write_record(&rec)?;
        steps.end("record");
        steps.finish();
        Ok(rec)
    }
}

/// Waits for the pod's shim to have started, if it was being started (a
/// spare's runs already; a second call has nothing to wait for).
fn join_shim(job: &Mutex<Option<ShimJob>>) -> Result<(), SandboxError> {
    let spawned = job.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let Some(h) = spawned {
        h.join()
            .map_err(|_| SandboxError::Shim("shim start thread panicked".into()))?
            .map_err(|e| SandboxError::Shim(e.to_string()))?;
    }
    Ok(())
}
