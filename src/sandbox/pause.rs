//! The pause container, for a pod whose containers share one PID namespace
//! (`shareProcessNamespace`): its process is that namespace's init, which
//! the containers join and which reaps the pod's orphans.
//!
//! Other pods have no pause. Their network, IPC and UTS namespaces are
//! pinned by bind mounts, the host name is set in the pinned UTS namespace
//! and the sysctls in the pinned namespaces by the server, so a process
//! that only sleeps would hold nothing: it would cost each pod a rootfs
//! mount, a bundle, a runtime create and start, and a kill at the end.

use super::manager::SandboxManager;
use super::undo::Undo;
use super::userns::PodUserns;
use super::{spec, SandboxError};
use crate::api::cri::PodSandboxConfig;
use crate::store::atomic;
use std::path::{Path, PathBuf};

/// What the pause of a pod is made from.
pub(super) struct PauseAsk<'a> {
    pub c: &'a PodSandboxConfig,
    pub image: &'a crate::image::ImageRecord,
    /// The sandbox dir; the bundle is made in it.
    pub dir: &'a Path,
    pub userns: Option<&'a PodUserns>,
    /// The monitor whose mount namespace holds the pod's mounts, if any.
    pub monitor: Option<u32>,
    pub netns: Option<&'a Path>,
    pub ipcns: Option<&'a Path>,
    pub utsns: Option<&'a Path>,
    pub shm: Option<&'a Path>,
    pub cgroups_path: &'a str,
    /// Pod annotations the handler passes into the spec.
    pub annotations: &'a [(String, String)],
}

/// `uid[:gid]` from the pause image's User (names fall back to 0); an id
/// beyond 2^31-1 is refused (the kernel would read 4294967295 as
/// "unchanged": root).
fn image_user(user: &str) -> Result<(u32, u32), SandboxError> {
    use crate::security::ids::{parse_id, IdError};
    let what = || format!("the sandbox image's User {user:?}");
    let invalid = |IdError(m)| SandboxError::Invalid(m);
    let mut parts = user.split(':');
    let uid = parse_id(parts.next().unwrap_or(""), "uid", &what)
        .map_err(invalid)?
        .unwrap_or(0);
    let gid = parse_id(parts.next().unwrap_or(""), "gid", &what)
        .map_err(invalid)?
        .unwrap_or(uid);
    Ok((uid, gid))
}

impl SandboxManager {
    /// The pause's bundle: its rootfs (an overlay of the pause image,
    /// unmounted by `undo` on failure) and its config.json.
    pub(super) fn pause_bundle(
        &self,
        a: &PauseAsk<'_>,
        undo: &mut Undo,
        steps: &mut crate::timing::Stages,
    ) -> Result<PathBuf, SandboxError> {
        let bundle = a.dir.join("bundle");
        let rootfs = bundle.join("rootfs");
        for d in ["rootfs", "upper", "work"] {
            std::fs::create_dir_all(bundle.join(d)).map_err(SandboxError::io("create bundle"))?;
        }
        if let Some(u) = a.userns {
            let pins = u.pin.parent().unwrap_or(&u.pin);
            for p in [rootfs.as_path(), pins] {
                crate::idmap::searchable_by(p, Some(u.root()))
                    .map_err(SandboxError::Unreachable)?;
            }
        }
        super::rootfs::mount(&self.images, a.image, &bundle, a.userns)?;
        steps.end("rootfs");
        {
            let q = rootfs.clone();
            undo.push("rootfs mount", move || {
                let _ = rustix::mount::unmount(&q, rustix::mount::UnmountFlags::DETACH);
            });
        }
        let img_cfg: crate::image::manifest::ImageConfig =
            serde_json::from_slice(&self.images.config_json(a.image)?)
                .map_err(|e| SandboxError::Invalid(format!("pause image config: {e}")))?;
        let defaults = img_cfg.config.unwrap_or_default();
        let mut args = defaults.entrypoint.unwrap_or_default();
        args.extend(defaults.cmd.unwrap_or_default());
        if args.is_empty() {
            return Err(SandboxError::Invalid(format!(
                "sandbox image {} has no entrypoint or command",
                a.image.id
            )));
        }
        let mut env = defaults.env.unwrap_or_default();
        if !env.iter().any(|e| e.starts_with("PATH=")) {
            env.push("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into());
        }
        let sc =
            a.c.linux
                .as_ref()
                .and_then(|l| l.security_context.clone())
                .unwrap_or_default();
        let (mut uid, mut gid) = image_user(defaults.user.as_deref().unwrap_or(""))?;
        if let Some(u) = sc.run_as_user {
            uid = u.value as u32;
        }
        if let Some(g) = sc.run_as_group {
            gid = g.value as u32;
        }
        let mut config = spec::pause(&spec::PauseSpec {
            args,
            env,
            uid,
            gid,
            readonly_rootfs: sc.readonly_rootfs,
            cgroups_path: a.cgroups_path.to_string(),
            netns: a.netns,
            ipcns: a.ipcns,
            utsns: a.utsns,
            userns: a.userns,
            cgroup_ns: crate::cgroup::Layout::host().is_v2(),
            oom_score_adj: spec::clamp_oom_score_adj(-998),
            shm: a.shm,
            seccomp: {
                // Older kubelets still send the deprecated path form.
                #[allow(deprecated)]
                let legacy = sc.seccomp_profile_path.clone();
                crate::security::seccomp::profile(
                    sc.seccomp.as_ref(),
                    &legacy,
                    sc.privileged,
                    &spec::DEFAULT_CAPS
                        .iter()
                        .map(|c| c.to_string())
                        .collect::<Vec<_>>(),
                )
                .map_err(|crate::security::ProfileError(m)| SandboxError::Invalid(m))?
            },
        });
        for (k, v) in a.annotations {
            config["annotations"][k] = serde_json::json!(v);
        }
        if let Some(pid) = a.monitor {
            super::podns::reach_namespaces(pid, &mut config);
        }
        atomic::write_state_json(&bundle.join("config.json"), &config)
            .map_err(SandboxError::io("write pause config"))?;
        Ok(bundle)
    }
}
