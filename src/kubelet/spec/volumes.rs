//! The pod's directory on the node and what lives in it:
//!
//! ```text
//! <root>/pods/<uid>/volumes/kubernetes.io~empty-dir/<volume>/   emptyDir (tmpfs for medium Memory)
//! <root>/pods/<uid>/containers/<container>/<random>             termination-message files
//! <root>/pods/<uid>/etc-hosts                                   the kubelet-managed /etc/hosts
//! ```
//!
//! hostPath volumes are checked (and created for the *OrCreate types) but
//! never live here. Removal unmounts the pod's tmpfs volumes first and never
//! follows symlinks out of the pod directory.

use crate::kubelet::kit::defaults;
use crate::kubelet::kit::settings::Settings;
use k8s_openapi::api::core::v1::Pod;
use std::collections::HashMap;
use std::io::Write as _;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    #[error("MountVolume.SetUp failed for volume {volume:?}: {message}")]
    Setup { volume: String, message: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> VolumeError + '_ {
    move |source| VolumeError::Io {
        path: path.to_path_buf(),
        source,
    }
}

pub fn pod_dir(s: &Settings, uid: &str) -> PathBuf {
    s.root.join("pods").join(uid)
}

/// Creates or checks every volume; returns volume name → host path.
pub fn setup(s: &Settings, pod: &Pod) -> Result<HashMap<String, PathBuf>, VolumeError> {
    let dir = pod_dir(s, defaults::uid(pod));
    let mut out = HashMap::new();
    for v in pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
    {
        let fail = |message: String| VolumeError::Setup {
            volume: v.name.clone(),
            message,
        };
        if let Some(e) = &v.empty_dir {
            let p = dir.join("volumes/kubernetes.io~empty-dir").join(&v.name);
            std::fs::create_dir_all(&p).map_err(io(&p))?;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o777)).map_err(io(&p))?;
            if e.medium.as_deref() == Some("Memory") && !is_mountpoint(&p) {
                let mut opts = String::from("mode=0777");
                if let Some(q) = &e.size_limit {
                    if let Ok(bytes) = crate::kubelet::kit::quantity::value(&q.0) {
                        opts.push_str(&format!(",size={bytes}"));
                    }
                }
                rustix::mount::mount(
                    "tmpfs",
                    &p,
                    "tmpfs",
                    rustix::mount::MountFlags::empty(),
                    Some(std::ffi::CString::new(opts).unwrap_or_default().as_c_str()),
                )
                .map_err(|e| fail(format!("mount tmpfs at {}: {e}", p.display())))?;
            }
            out.insert(v.name.clone(), p);
        } else if let Some(h) = &v.host_path {
            let p = PathBuf::from(&h.path);
            let meta = std::fs::metadata(&p);
            match h.type_.as_deref().unwrap_or("") {
                "" => {}
                "DirectoryOrCreate" => {
                    if meta.is_err() {
                        std::fs::create_dir_all(&p)
                            .map_err(|e| fail(format!("create {}: {e}", h.path)))?;
                        let _ =
                            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755));
                    } else if !meta.as_ref().is_ok_and(|m| m.is_dir()) {
                        return Err(fail(format!(
                            "hostPath type check failed: {} is not a directory",
                            h.path
                        )));
                    }
                }
                "Directory" => {
                    if !meta.as_ref().is_ok_and(|m| m.is_dir()) {
                        return Err(fail(format!(
                            "hostPath type check failed: {} is not a directory",
                            h.path
                        )));
                    }
                }
                "FileOrCreate" => {
                    if meta.is_err() {
                        std::fs::OpenOptions::new()
                            .create(true)
                            .append(true)
                            .open(&p)
                            .map_err(|e| fail(format!("create {}: {e}", h.path)))?;
                    } else if !meta.as_ref().is_ok_and(|m| m.is_file()) {
                        return Err(fail(format!(
                            "hostPath type check failed: {} is not a file",
                            h.path
                        )));
                    }
                }
                "File" => {
                    if !meta.as_ref().is_ok_and(|m| m.is_file()) {
                        return Err(fail(format!(
                            "hostPath type check failed: {} is not a file",
                            h.path
                        )));
                    }
                }
                t @ ("Socket" | "CharDevice" | "BlockDevice") => {
                    let ok = meta.as_ref().is_ok_and(|m| {
                        let ft = m.file_type();
                        match t {
                            "Socket" => ft.is_socket(),
                            "CharDevice" => ft.is_char_device(),
                            _ => ft.is_block_device(),
                        }
                    });
                    if !ok {
                        return Err(fail(format!(
                            "hostPath type check failed: {} is not a {t}",
                            h.path
                        )));
                    }
                }
                other => return Err(fail(format!("unsupported hostPath type {other:?}"))),
            }
            out.insert(v.name.clone(), p);
        }
    }
    Ok(out)
}

/// A fresh, empty termination-message file for one container start.
pub fn termination_file(s: &Settings, uid: &str, container: &str) -> Result<PathBuf, VolumeError> {
    let d = pod_dir(s, uid).join("containers").join(container);
    std::fs::create_dir_all(&d).map_err(io(&d))?;
    let p = d.join(format!("{:08x}", rand::random::<u32>()));
    std::fs::File::create(&p).map_err(io(&p))?;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o666)).map_err(io(&p))?;
    Ok(p)
}

/// The kubelet-managed /etc/hosts: the pod's IP and hostname (or, for
/// host-network pods, the node's own hosts file).
pub fn etc_hosts(
    s: &Settings,
    pod: &Pod,
    pod_ips: &[String],
    hostname: &str,
    domain: &str,
) -> Result<PathBuf, VolumeError> {
    let dir = pod_dir(s, defaults::uid(pod));
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    let p = dir.join("etc-hosts");
    let mut text = String::new();
    if defaults::host_network(pod) {
        text.push_str("# Kubernetes-managed hosts file (host network).\n");
        text.push_str(&std::fs::read_to_string("/etc/hosts").unwrap_or_default());
    } else {
        text.push_str("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n");
        for ip in pod_ips {
            if domain.is_empty() {
                text.push_str(&format!("{ip}\t{hostname}\n"));
            } else {
                text.push_str(&format!("{ip}\t{hostname}.{domain}\t{hostname}\n"));
            }
        }
    }
    let aliases = pod.spec.as_ref().and_then(|s| s.host_aliases.as_ref());
    if let Some(a) = aliases.filter(|a| !a.is_empty()) {
        text.push_str("\n# Entries added by HostAliases.\n");
        for h in a {
            text.push_str(&format!(
                "{}\t{}\n",
                h.ip,
                h.hostnames.clone().unwrap_or_default().join("\t")
            ));
        }
    }
    let tmp = dir.join(".etc-hosts.tmp");
    let mut f = std::fs::File::create(&tmp).map_err(io(&tmp))?;
    f.write_all(text.as_bytes()).map_err(io(&tmp))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644)).map_err(io(&tmp))?;
    std::fs::rename(&tmp, &p).map_err(io(&p))?;
    Ok(p)
}

fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut v: Vec<PathBuf> = text
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(PathBuf::from)
        .filter(|m| m.starts_with(dir))
        .collect();
    v.sort();
    v.reverse();
    v
}

pub fn is_mountpoint(p: &Path) -> bool {
    mounts_under(p).iter().any(|m| m == p)
}

/// Unmounts and deletes a pod's directory. Refuses (leaves it) when a
/// mount under it cannot be unmounted.
pub fn remove_pod_dir(s: &Settings, uid: &str) -> Result<(), VolumeError> {
    let dir = pod_dir(s, uid);
    if !dir.exists() {
        return Ok(());
    }
    for m in mounts_under(&dir) {
        rustix::mount::unmount(&m, rustix::mount::UnmountFlags::DETACH).map_err(|e| {
            VolumeError::Io {
                path: m.clone(),
                source: e.into(),
            }
        })?;
    }
    std::fs::remove_dir_all(&dir).map_err(io(&dir))
}

/// UIDs that have a pod directory.
pub fn pod_dirs(s: &Settings) -> Vec<String> {
    std::fs::read_dir(s.root.join("pods"))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().to_string())
                .collect()
        })
        .unwrap_or_default()
}
