//! CreateContainer: the container's directory and rootfs (an overlay of
//! the image's snapshots), its mount points, user and OCI spec, then the
//! create in the pod's shim and the record. A failure is undone by
//! `discard` (and, after a crash, by recovery).

use super::context::{ImageDefaults, PodContext};
use super::events::Kind;
use super::manager::*;
use super::record::{ContainerRecord, ContainerState, RECORD_VERSION};
use super::spec;
use super::{user, SpecError};
use crate::api::cri::{ContainerConfig, NamespaceMode};
use crate::api::shim::{shim_request::Request, CreateRequest, DeleteRequest};
use crate::sandbox::manager::SandboxState;
use crate::sandbox::SandboxError;
use crate::store::atomic;
use crate::sys::now_ns;
use prost::Message;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// What CreateContainer found before anything was made.
struct Found {
    image: crate::image::ImageRecord,
    volumes: Vec<super::image_volumes::Volume>,
    /// The config's stop signal; None: the image's, or SIGTERM.
    stop_signal: Option<i32>,
    /// The CDI devices asked for, resolved.
    devices: Vec<crate::cdi::Found>,
}

impl ContainerManager {
    /// CreateContainer.
    pub async fn create(
        self: &Arc<Self>,
        sandbox_id: &str,
        c: ContainerConfig,
    ) -> Result<String, SandboxError> {
        let pod = self
            .sandboxes
            .get(sandbox_id)
            .ok_or_else(|| SandboxError::NotFound(format!("pod sandbox {sandbox_id} not found")))?;
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
        // The kubelet repeats the pod's user namespace options here.
        super::idmapped::check(&c, pod.userns.as_ref())?;
        let image_name = c
            .image
            .as_ref()
            .map(|i| i.image.clone())
            .unwrap_or_default();
        let image = self.images.find(&image_name).ok_or_else(|| {
            SandboxError::NotFound(format!("image {image_name:?} not found (pull it first)"))
        })?;
        let stop_signal = super::signal::from_cri(c.stop_signal).map_err(SandboxError::Invalid)?;
        let volumes = super::image_volumes::resolve(&self.images, &c)?;
        // CDI devices resolved before anything is made: never a container
        // without a device it asked for.
        let devices = crate::cdi::resolve(
            &self.cdi_dirs.read().unwrap_or_else(|p| p.into_inner()),
            &crate::cdi::requested(&c),
        )
        .map_err(SandboxError::Invalid)?;
        // A place among the creates running at once (`gate.rs`), taken
        // before the name is reserved: a caller gone while it waits leaves
        // nothing.
        let place = super::gate::create_place()
            .await
            .map_err(|e| SandboxError::io("wait for a create place")(std::io::Error::other(e)))?;
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
        let found = Found {
            image,
            volumes,
            stop_signal,
            devices,
        };
        // From here the create runs to its end in a task of its own, with
        // its place: a caller that goes (the kubelet's deadline under a
        // burst) leaves a container made, or one unwound with its name
        // released, never a name reserved for nothing.
        let this = self.clone();
        let sandbox_id = sandbox_id.to_string();
        crate::otel::spawn(async move {
            let _place = place;
            this.create_reserved(id, name, sandbox_id, c, found).await
        })
        .await
        .map_err(err)?
    }

    /// The rest of a create whose name is reserved.
    async fn create_reserved(
        self: Arc<Self>,
        id: String,
        name: String,
        sandbox_id: String,
        c: ContainerConfig,
        found: Found,
    ) -> Result<String, SandboxError> {
        let this = self.clone();
        let (id2, sid) = (id.clone(), sandbox_id.clone());
        let r = crate::otel::spawn_blocking(move || this.create_blocking(&id2, &sid, &c, &found))
            .await
            .map_err(err)
            .and_then(|r| r);
        if r.is_err() {
            self.lock().1.remove(&name);
            self.discard(Some(&sandbox_id), &id);
        }
        if r.is_ok() {
            if let Some((nri, pod, c)) = self.nri_event(&id) {
                nri.post_create_container(&pod, &c).await;
            }
        }
        r.map(|_| id)
    }

    fn create_blocking(
        &self,
        id: &str,
        sandbox_id: &str,
        c: &ContainerConfig,
        found: &Found,
    ) -> Result<(), SandboxError> {
        let image = &found.image;
        let pod = self
            .sandboxes
            .get(sandbox_id)
            .ok_or_else(|| SandboxError::NotFound(format!("pod sandbox {sandbox_id} not found")))?;
        let mut steps = crate::timing::Stages::new("CreateContainer");
        // The pod's handler runs its containers too.
        let handler = self.sandboxes.handlers().get(&pod.runtime_handler)?.clone();
        let oci = handler.oci_request()?;
        let dir = self.dir(id);
        let userns_root = pod.userns.as_ref().map(|u| u.root());
        crate::store::modes::make_private(&dir)
            .and_then(|()| crate::store::modes::for_pod(&dir, userns_root))
            .map_err(SandboxError::io("create container dir"))?;
        // First, so an interrupted create can be undone (recover.rs).
        std::fs::write(dir.join(super::record::SANDBOX_FILE), sandbox_id)
            .map_err(SandboxError::io("create container dir"))?;
        for d in ["rootfs", "upper", "work"] {
            std::fs::create_dir_all(dir.join(d))
                .map_err(SandboxError::io("create container dir"))?;
        }
        std::fs::write(dir.join("config.pb"), c.encode_to_vec())
            .map_err(SandboxError::io("save container config"))?;
        if pod.userns.is_some() {
            crate::idmap::searchable_by(&dir.join("rootfs"), userns_root)
                .map_err(SandboxError::Unreachable)?;
        }
        crate::sandbox::rootfs::mount(&self.images, image, &dir, pod.userns.as_ref())?;
        steps.end("rootfs");
        let mut with_volumes = c.clone();
        super::image_volumes::mount_all(&self.images, &mut with_volumes, &dir, &found.volumes)?;

        // Mount points of the config's mounts, created inside the rootfs
        // (confined: an image symlink cannot send them to the host). Each
        // destination is checked as asked and as resolved through the
        // image's symlinks, and the spec names it resolved, once.
        let sc = c
            .linux
            .as_ref()
            .and_then(|l| l.security_context.clone())
            .unwrap_or_default();
        let dev = if sc.privileged && oci.is_some() {
            super::kernel_mounts::DevVolume::Privileged
        } else {
            super::kernel_mounts::DevVolume::Refused
        };
        for m in &mut with_volumes.mounts {
            let host = Path::new(&m.host_path);
            if !host.is_absolute() || !m.container_path.starts_with('/') {
                return Err(SandboxError::Invalid(format!(
                    "mount {:?} -> {:?}: both paths must be absolute",
                    m.host_path, m.container_path
                )));
            }
            check_destination(&m.container_path, &m.container_path, dev)?;
            if let Some(at) = crate::image::confined::resolve_in_root(
                &dir.join("rootfs"),
                Path::new(&m.container_path),
            ) {
                check_destination(&m.container_path, &at.to_string_lossy(), dev)?;
                m.container_path = at.to_string_lossy().into_owned();
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
        let c = &with_volumes;
        steps.end("mount points");
        let cfg: crate::image::manifest::ImageConfig =
            serde_json::from_slice(&self.images.config_json(image)?)
                .map_err(|e| SandboxError::Invalid(format!("image config: {e}")))?;
        let d = cfg.config.unwrap_or_default();
        let mut volumes = Vec::new();
        for (i, v) in d.volumes.clone().unwrap_or_default().keys().enumerate() {
            check_destination(
                &format!("{v} (the image's VOLUME)"),
                v,
                super::kernel_mounts::DevVolume::Refused,
            )?;
            let host = dir.join("volumes").join(i.to_string());
            std::fs::create_dir_all(&host).map_err(SandboxError::io("create volume"))?;
            if let Some((uid, gid)) = pod.userns.as_ref().map(|u| u.root()) {
                std::os::unix::fs::chown(&host, Some(uid), Some(gid))
                    .map_err(SandboxError::io("give the volume to the pod's root"))?;
            }
            volumes.push((v.clone(), host));
        }
        let img = ImageDefaults {
            entrypoint: d.entrypoint.clone().unwrap_or_default(),
            cmd: d.cmd.clone().unwrap_or_default(),
            env: d.env.clone().unwrap_or_default(),
            working_dir: d.working_dir.clone().unwrap_or_default(),
            volumes,
        };
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
            user::read_user_db(&rootfs, "etc/passwd")
                .map_err(|SpecError(m)| SandboxError::Invalid(m))?
                .as_deref(),
            user::read_user_db(&rootfs, "etc/group")
                .map_err(|SpecError(m)| SandboxError::Invalid(m))?
                .as_deref(),
        )
        .map_err(|SpecError(m)| SandboxError::Invalid(m))?;
        let cwd = if c.working_dir.is_empty() {
            img.working_dir.as_str()
        } else {
            c.working_dir.as_str()
        };
        super::mounts::make_working_dir(
            &rootfs,
            cwd,
            &who,
            pod.userns.as_ref().map(|u| |uid, gid| u.to_host(uid, gid)),
        )?;
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
            && !pod.has_pause()
        {
            return Err(SandboxError::Invalid(
                "namespace_options.pid is POD, but the pod's containers share no PID namespace \
                 (its own pid mode is not POD)"
                    .into(),
            ));
        }
        super::mounts::check_recursive_read_only(c)
            .map_err(|SpecError(m)| SandboxError::Invalid(m))?;
        if c.mounts.iter().any(|m| m.recursive_read_only)
            && !handler.features(true, true).recursive_read_only_mounts
        {
            return Err(SandboxError::Invalid(format!(
                "runtime handler {:?} cannot make mounts recursively read-only: its runtime's \
                 `features` lists no rro mount option",
                handler.name
            )));
        }
        if c.mounts.iter().any(|m| m.propagation != 0) {
            let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
            super::mounts::check_propagation(c, &mountinfo)
                .map_err(|SpecError(m)| SandboxError::Invalid(m))?;
        }
        let mut c = c.clone();
        super::idmapped::mount_all(&mut c, &dir, pod.userns.as_ref())?;
        let monitor = super::pod_mounts::monitor(&pod, &self.sandboxes.shim_dir(sandbox_id))?;
        if let Some(pid) = monitor {
            super::pod_mounts::stage_unseen(pid, &mut c, &dir)?;
            super::pod_mounts::hand_over(pid, &dir)?;
        }
        if let Some(res) = c.linux.as_mut().and_then(|l| l.resources.as_mut()) {
            crate::cgroup::validate(res, crate::cgroup::Layout::host())?;
            crate::cgroup::prune_unsupported(crate::cgroup::Layout::host(), &cgroups_path, res);
        }
        let mut spec = spec::build(id, &c, &img, &who, &ctx)
            .map_err(|SpecError(m)| SandboxError::Invalid(m))?;
        crate::cdi::apply(&mut spec, &found.devices).map_err(SandboxError::Invalid)?;
        if sc.privileged && !handler.config.privileged_without_host_devices {
            super::host_devices::add(&mut spec);
        }
        let pod_config = self.sandboxes.saved_config(sandbox_id);
        for (k, v) in handler.pod_annotations(&pod_config.annotations) {
            if spec["annotations"].get(&k).is_none() {
                spec["annotations"][k] = serde_json::json!(v);
            }
        }
        if handler.is_shim() {
            let md = c.metadata.clone().unwrap_or_default();
            let image_name = c.image.as_ref().map(|i| i.image.as_str()).unwrap_or("");
            let cri = crate::sandbox::handlers::container_annotations(
                sandbox_id,
                &pod_config,
                &md.name,
                image_name,
            );
            for (k, v) in cri {
                spec["annotations"][k] = serde_json::json!(v);
            }
        }
        if let Some(u) = &pod.userns {
            crate::sandbox::spec::user_namespace(&mut spec, u);
        }
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
            stop_signal: found.stop_signal.unwrap_or_else(|| {
                d.stop_signal
                    .as_deref()
                    .and_then(super::signal::parse_signal)
                    .unwrap_or(libc::SIGTERM)
            }),
            image_volumes: found.volumes.iter().map(|v| v.image.id.clone()).collect(),
        };
        // The node's resource plugins adjust the spec last (NRI).
        self.adjust_spec(&pod, &rec, &mut spec)?;
        if oci.is_none() {
            crate::nri::adjust::for_libcontainer(&mut spec);
        }
        if let Some(pid) = monitor {
            crate::sandbox::podns::reach_namespaces(pid, &mut spec);
        }
        atomic::write_state_json(&dir.join("config.json"), &spec)
            .map_err(SandboxError::io("write container spec"))?;
        steps.end("spec");
        self.watch_pod_exits(sandbox_id);
        let creating = Creating::new(self, &rec);
        let made = shim_call(
            &self.sandboxes.shim_dir(sandbox_id),
            Request::Create(CreateRequest {
                id: id.to_string(),
                bundle: dir.display().to_string(),
                log_path,
                stdin: c.stdin,
                stdin_once: c.stdin_once,
                tty: c.tty,
                cgroups_path: cgroups_path.clone(),
                oci: crate::sandbox::handlers::for_pod(oci, sandbox_id),
                ..Default::default()
            }),
        );
        drop(creating);
        let made = made?;
        let runtime = Duration::from_micros(made.runtime_us);
        steps.end_split("shim create", "runtime create", runtime);
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
        self.events.emit_container(Kind::Created, &rec);
        steps.end("record");
        steps.finish();
        tracing::info!(container_id = %id, pod_sandbox_id = %sandbox_id, "container created");
        Ok(())
    }
}

/// A container listed as being created for as long as its runtime's
/// create runs.
struct Creating<'a>(&'a ContainerManager, String);

impl<'a> Creating<'a> {
    fn new(m: &'a ContainerManager, rec: &ContainerRecord) -> Creating<'a> {
        m.creating
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(rec.id.clone(), rec.clone());
        Creating(m, rec.id.clone())
    }
}

impl Drop for Creating<'_> {
    fn drop(&mut self) {
        self.0
            .creating
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.1);
    }
}

/// A mount landing at `dest` (its destination as `asked`, or resolved):
/// never a bind on or under /proc, nor a volume at /dev (but as `dev`
/// allows) or on the runtime's nodes there.
fn check_destination(
    asked: &str,
    dest: &str,
    dev: super::kernel_mounts::DevVolume,
) -> Result<(), SandboxError> {
    super::mounts::check_proc_destination(asked, dest)
        .and_then(|()| super::kernel_mounts::check_dev_destination(asked, dest, dev))
        .map_err(|SpecError(e)| SandboxError::Invalid(e))
}
