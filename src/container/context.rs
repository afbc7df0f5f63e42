//! What the spec builder is given beside the CRI config: the pod's
//! namespaces, files and cgroups path, and the image's defaults. Plain
//! data, read by `spec.rs` and `mounts.rs` alike.

use std::path::{Path, PathBuf};

/// What the pod contributes.
pub struct PodContext<'a> {
    pub netns: Option<&'a Path>,
    pub ipcns: Option<&'a Path>,
    pub utsns: Option<&'a Path>,
    /// The pause process, whose PID namespace a POD-mode container joins.
    pub pause_pid: i32,
    /// resolv.conf, hostname and hosts of the pod.
    pub files_dir: &'a Path,
    /// The pod's /dev/shm (None: the host's).
    pub shm: Option<&'a Path>,
    /// The container's OCI cgroups path (`cgroup::Driver::cgroups_path`).
    pub cgroups_path: &'a str,
}

/// What the image contributes.
#[derive(Default)]
pub struct ImageDefaults {
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    pub env: Vec<String>,
    pub working_dir: String,
    /// Container paths of the image's VOLUMEs, with the host dirs backing them.
    pub volumes: Vec<(String, PathBuf)>,
}
