//! What a container's config is built from besides the pod: its volumes,
//! restarts, addresses, and the secrets and config maps its env names.

use super::api_volumes::Kind;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

/// Everything a container's config depends on besides the pod.
pub struct Inputs<'a> {
    pub restart_count: i32,
    pub pod_ips: &'a [String],
    pub host_ip: &'a str,
    pub volumes: &'a HashMap<String, PathBuf>,
    /// Image volumes: volume name → the runtime's ID of its pulled image.
    pub image_volumes: &'a HashMap<String, String>,
    /// Volume-mount index → the bind of its subPath (`subpath.rs`).
    pub subpaths: &'a HashMap<usize, PathBuf>,
    pub termination_file: Option<PathBuf>,
    pub etc_hosts: Option<PathBuf>,
    pub image_ref: &'a str,
    /// The secrets and config maps the env refers to.
    pub env_objects: &'a EnvObjects,
    /// Service link variables (overridden by the container's own env).
    pub service_env: &'a [(String, String)],
}

/// Env from secrets and config maps: (kind, name) → data, for every
/// object the container's env and envFrom name (None: optional, absent).
pub type EnvObjects = HashMap<(Kind, String), Option<BTreeMap<String, Vec<u8>>>>;
