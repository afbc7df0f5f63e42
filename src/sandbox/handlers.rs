//! The runtime handlers of a running server (`[runtimes.*]` in the config):
//! which one a pod's `runtime_handler` names, what the shim is told to run
//! its pause and containers with, and what each can do (Status).
//!
//! A pod's handler is looked up when it is run and again for each of its
//! containers: `""` is `default_runtime`; a name not configured is
//! InvalidArgument naming the configured ones. An OCI handler's binary is
//! looked up on PATH at each use (a runtime installed after the server
//! started is found); one that is not there is FailedPrecondition.
//!
//! An OCI runtime's features come from its `features` command (runc 1.1
//! and later, crun), asked once: recursive read-only mounts when it lists
//! the `rro` mount option, user namespaces when it can idmap mounts
//! (`linux.mountExtensions.idmap`). A runtime without the command has
//! neither.

use super::SandboxError;
use crate::api::cri::{RuntimeHandler, RuntimeHandlerFeatures};
use crate::api::shim::OciRuntime;
use crate::config::{Config, RuntimeConfig};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// One configured handler.
#[derive(Debug, Clone)]
pub struct Handler {
    pub name: String,
    pub config: RuntimeConfig,
    /// Its state root (OCI handlers).
    pub root: PathBuf,
    /// Global flags husk adds (`--systemd-cgroup`).
    systemd: bool,
    /// The server's state dir (a shim's `-address` and socket dir derive
    /// from it).
    state: PathBuf,
}

/// The handlers by name, and the default's name.
#[derive(Debug, Clone)]
pub struct Handlers {
    default: String,
    by_name: BTreeMap<String, Handler>,
}

/// The handlers in force: a reload replaces them whole; a pod keeps the
/// handler it was run with by name.
#[derive(Debug)]
pub struct Live(std::sync::RwLock<std::sync::Arc<Handlers>>);

impl Live {
    pub fn new(h: Handlers) -> Live {
        Live(std::sync::RwLock::new(std::sync::Arc::new(h)))
    }

    pub fn current(&self) -> std::sync::Arc<Handlers> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn set(&self, h: Handlers) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = std::sync::Arc::new(h);
    }
}

/// What an OCI runtime can do, as its `features` says.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct OciFeatures {
    pub rro: bool,
    pub idmap: bool,
}

/// Features asked of each binary, once per process.
static FEATURES: Mutex<Option<HashMap<PathBuf, OciFeatures>>> = Mutex::new(None);

/// Features asked of each shim (binary, options), once per process.
type ShimKey = (PathBuf, Vec<u8>);
static SHIM_FEATURES: Mutex<Option<HashMap<ShimKey, OciFeatures>>> = Mutex::new(None);

/// Finds `path` (a path, or a name on PATH) as an executable file.
pub fn find_binary(path: &str) -> Result<PathBuf, String> {
    let is_exe = |p: &Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if path.contains('/') {
        let p = PathBuf::from(path);
        return if is_exe(&p) {
            Ok(p)
        } else {
            Err(format!("{path} is not an executable file"))
        };
    }
    let search = std::env::var("PATH").unwrap_or_else(|_| "/usr/sbin:/usr/bin:/sbin:/bin".into());
    search
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(path))
        .find(|p| is_exe(p))
        .ok_or_else(|| format!("{path} is not found on PATH ({search})"))
}

/// Parses a `features` answer.
pub fn parse_features(json: &[u8]) -> OciFeatures {
    let v: serde_json::Value = serde_json::from_slice(json).unwrap_or_default();
    OciFeatures {
        rro: v["mountOptions"]
            .as_array()
            .is_some_and(|o| o.iter().any(|x| x == "rro")),
        idmap: v["linux"]["mountExtensions"]["idmap"]["enabled"] == true,
    }
}

fn ask_features(bin: &Path) -> OciFeatures {
    let mut guard = FEATURES.lock().unwrap_or_else(|p| p.into_inner());
    let cache = guard.get_or_insert_with(HashMap::new);
    if let Some(f) = cache.get(bin) {
        return *f;
    }
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;
    let out = std::process::Command::new(bin)
        .arg("features")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .ok()
        .and_then(|c| crate::network::bounded::run(c, Vec::new(), Duration::from_secs(5)).ok());
    let f = match out {
        Some(o) if o.status.success() => parse_features(&o.stdout),
        _ => OciFeatures::default(),
    };
    cache.insert(bin.to_path_buf(), f);
    f
}

impl Handler {
    pub fn is_oci(&self) -> bool {
        self.config.is_oci()
    }

    pub fn is_shim(&self) -> bool {
        self.config.is_shim()
    }

    /// A shim handler's binary: its `path`, else the one its runtime type
    /// names, on PATH.
    pub fn shim_binary(&self) -> Result<PathBuf, String> {
        let name = if self.config.path.is_empty() {
            crate::config::runtimes::shim_binary_name(&self.config.runtime_type)?
        } else {
            self.config.path.clone()
        };
        find_binary(&name)
    }

    /// A shim handler's options as the Any its shim is given (none when
    /// it has none).
    pub fn shim_options(&self) -> Result<Option<prost_types::Any>, String> {
        crate::shim::v2::options::encode(
            &self.config.runtime_type,
            &self.config.options.table(),
            self.systemd,
            &self.root.display().to_string(),
        )
    }

    /// What a shim's `-info` says its runtime can do (asked once per
    /// binary and options; nothing when it does not answer).
    fn shim_features(&self) -> OciFeatures {
        let (Ok(bin), Ok(options)) = (self.shim_binary(), self.shim_options()) else {
            return OciFeatures::default();
        };
        let key = (
            bin.clone(),
            options
                .as_ref()
                .map(|o| o.value.clone())
                .unwrap_or_default(),
        );
        let mut guard = SHIM_FEATURES.lock().unwrap_or_else(|p| p.into_inner());
        let cache = guard.get_or_insert_with(HashMap::new);
        if let Some(f) = cache.get(&key) {
            return *f;
        }
        let f = crate::shim::v2::start::info(&bin, options.as_ref(), Duration::from_secs(5))
            .ok()
            .and_then(|i| crate::shim::v2::start::features_json(&i).map(parse_features))
            .unwrap_or_default();
        cache.insert(key, f);
        f
    }

    /// A shim handler's: the binary, and what it is started with.
    fn shim_request(&self) -> Result<Option<OciRuntime>, SandboxError> {
        let bin = self.shim_binary().map_err(|e| {
            SandboxError::NotRunning(format!(
                "runtime handler {:?} ({}): {e}",
                self.name, self.config.runtime_type
            ))
        })?;
        let (options_type_url, options) = self
            .shim_options()
            .map_err(|e| {
                SandboxError::Invalid(format!("runtime handler {:?}: options: {e}", self.name))
            })?
            .map(|o| (o.type_url, o.value))
            .unwrap_or_default();
        // A 2.3 shim's socket is `<dir>/<sha256>`, which must fit a socket
        // address (the dir at most 42 bytes): `<state>/v2s`, else a short
        // dir of this server's own. (The shim makes it 0700: never a dir
        // that pods' user namespaces must search.)
        let local = self.state.join("v2s");
        let socket_dir = if local.as_os_str().len() <= 42 {
            local.display().to_string()
        } else {
            use sha2::Digest;
            let tag =
                hex::encode(&sha2::Sha256::digest(self.state.as_os_str().as_encoded_bytes())[..8]);
            format!("/run/husk-v2s/{tag}")
        };
        Ok(Some(OciRuntime {
            path: bin.display().to_string(),
            root: self.root.display().to_string(),
            global_args: Vec::new(),
            no_pivot_root: false,
            timeout_ms: (self.config.timeout_secs * 1000) as u32,
            shim: Some(crate::api::shim::ShimV2 {
                runtime_type: self.config.runtime_type.clone(),
                options_type_url,
                options,
                sandbox_id: String::new(),
                grpc_address: self.state.join("shim-v2.sock").display().to_string(),
                socket_dir,
            }),
        }))
    }

    /// What the shim is told to run this handler's containers with (None:
    /// husk's own path). FailedPrecondition when the binary is not there.
    pub fn oci_request(&self) -> Result<Option<OciRuntime>, SandboxError> {
        if self.is_shim() {
            return self.shim_request();
        }
        if !self.is_oci() {
            return Ok(None);
        }
        let bin = find_binary(&self.config.path).map_err(|e| {
            SandboxError::NotRunning(format!("runtime handler {:?}: {e}", self.name))
        })?;
        let mut global_args = Vec::new();
        if self.systemd {
            global_args.push("--systemd-cgroup".to_string());
        }
        global_args.extend(self.config.options.flags().iter().cloned());
        Ok(Some(OciRuntime {
            path: bin.display().to_string(),
            root: self.root.display().to_string(),
            global_args,
            no_pivot_root: self.config.no_pivot_root,
            timeout_ms: (self.config.timeout_secs * 1000) as u32,
            shim: None,
        }))
    }

    /// What it can do, for Status and for the checks of a create.
    /// `husk_rro` and `husk_userns`: what husk's own path can.
    pub fn features(&self, husk_rro: bool, husk_userns: bool) -> RuntimeHandlerFeatures {
        // A shim's runtime: what its `-info` claims.
        if self.is_shim() {
            let f = self.shim_features();
            return RuntimeHandlerFeatures {
                recursive_read_only_mounts: husk_rro && f.rro,
                user_namespaces: husk_userns && f.idmap,
            };
        }
        if !self.is_oci() {
            return RuntimeHandlerFeatures {
                recursive_read_only_mounts: husk_rro,
                user_namespaces: husk_userns,
            };
        }
        let f = find_binary(&self.config.path)
            .map(|b| ask_features(&b))
            .unwrap_or_default();
        RuntimeHandlerFeatures {
            recursive_read_only_mounts: husk_rro && f.rro,
            user_namespaces: husk_userns && f.idmap,
        }
    }

    /// The pod annotations this handler passes into OCI specs.
    pub fn pod_annotations<'a>(
        &self,
        annotations: impl IntoIterator<Item = (&'a String, &'a String)>,
    ) -> Vec<(String, String)> {
        annotations
            .into_iter()
            .filter(|(k, _)| {
                self.config
                    .pod_annotations
                    .iter()
                    .any(|p| crate::config::runtimes::matches(p, k))
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

/// The annotations containerd's CRI gives a pod's sandbox spec, by which
/// a shim runtime knows a pod (Kata makes its VM of the sandbox; the runc
/// shim groups a pod's tasks by the sandbox id).
pub fn sandbox_annotations(
    id: &str,
    c: &crate::api::cri::PodSandboxConfig,
) -> Vec<(String, String)> {
    let mut a = pod_annotations_of(id, c);
    a.push(("io.kubernetes.cri.container-type".into(), "sandbox".into()));
    a.push((
        "io.kubernetes.cri.sandbox-log-directory".into(),
        c.log_directory.clone(),
    ));
    a
}

/// The annotations containerd's CRI gives a container's spec.
pub fn container_annotations(
    sandbox_id: &str,
    pod: &crate::api::cri::PodSandboxConfig,
    name: &str,
    image: &str,
) -> Vec<(String, String)> {
    let mut a = pod_annotations_of(sandbox_id, pod);
    a.push((
        "io.kubernetes.cri.container-type".into(),
        "container".into(),
    ));
    a.push(("io.kubernetes.cri.container-name".into(), name.into()));
    a.push(("io.kubernetes.cri.image-name".into(), image.into()));
    a
}

fn pod_annotations_of(id: &str, c: &crate::api::cri::PodSandboxConfig) -> Vec<(String, String)> {
    let md = c.metadata.clone().unwrap_or_default();
    vec![
        ("io.kubernetes.cri.sandbox-id".into(), id.into()),
        ("io.kubernetes.cri.sandbox-name".into(), md.name),
        ("io.kubernetes.cri.sandbox-namespace".into(), md.namespace),
        ("io.kubernetes.cri.sandbox-uid".into(), md.uid),
    ]
}

/// `oci` for the pod `sandbox_id`: a shim's tasks are grouped by it.
pub fn for_pod(mut oci: Option<OciRuntime>, sandbox_id: &str) -> Option<OciRuntime> {
    if let Some(s) = oci.as_mut().and_then(|o| o.shim.as_mut()) {
        s.sandbox_id = sandbox_id.to_string();
    }
    oci
}

impl Handlers {
    /// The handlers `cfg` configures; `systemd`: the cgroup driver is
    /// systemd's (OCI runtimes are told so).
    pub fn new(cfg: &Config, systemd: bool) -> Handlers {
        let by_name = cfg
            .runtimes
            .iter()
            .map(|(name, c)| {
                let root = if c.root.is_empty() {
                    cfg.state.join("runtimes").join(name)
                } else {
                    PathBuf::from(&c.root)
                };
                let h = Handler {
                    name: name.clone(),
                    config: c.clone(),
                    root,
                    systemd,
                    state: cfg.state.clone(),
                };
                (name.clone(), h)
            })
            .collect();
        Handlers {
            default: cfg.default_runtime.clone(),
            by_name,
        }
    }

    /// The handler a pod's `runtime_handler` names.
    pub fn get(&self, asked: &str) -> Result<&Handler, SandboxError> {
        let name = if asked.is_empty() {
            self.default.as_str()
        } else {
            asked
        };
        self.by_name.get(name).ok_or_else(|| {
            let names: Vec<&String> = self.by_name.keys().collect();
            SandboxError::Invalid(format!(
                "runtime handler {asked:?} is not configured; the configured handlers are \
                 {names:?} (\"\" is {:?})",
                self.default
            ))
        })
    }

    /// Status's list: `""` (the default) first, then each handler whose
    /// runtime is there, with its features.
    pub fn status(&self, husk_rro: bool, husk_userns: bool) -> Vec<RuntimeHandler> {
        let default = self.by_name.get(&self.default);
        default
            .map(|h| ("", h))
            .into_iter()
            .chain(self.by_name.iter().map(|(n, h)| (n.as_str(), h)))
            .filter(|(_, h)| {
                if h.is_shim() {
                    h.shim_binary().is_ok()
                } else {
                    !h.is_oci() || find_binary(&h.config.path).is_ok()
                }
            })
            .map(|(name, h)| RuntimeHandler {
                name: name.to_string(),
                features: Some(h.features(husk_rro, husk_userns)),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_come_from_the_runtimes_answer() {
        let runc_14 = br#"{"ociVersionMin":"1.0.0","mountOptions":["ro","rro","bind"],
            "linux":{"namespaces":["user"],"mountExtensions":{"idmap":{"enabled":true}}}}"#;
        assert_eq!(
            parse_features(runc_14),
            OciFeatures {
                rro: true,
                idmap: true
            }
        );
        let runc_11 = br#"{"mountOptions":["ro","bind"],"linux":{"namespaces":["user"]}}"#;
        assert_eq!(parse_features(runc_11), OciFeatures::default());
        assert_eq!(parse_features(b"not json"), OciFeatures::default());
    }

    #[test]
    fn unknown_handlers_name_the_configured_ones() {
        let h = Handlers::new(&Config::default(), false);
        assert_eq!(h.get("").expect("default").name, "husk");
        let e = h.get("kata").expect_err("unknown").to_string();
        assert!(
            e.contains("\"kata\"") && e.contains("\"husk\"") && e.contains("\"runc\""),
            "{e}"
        );
        let mut cfg = Config::default();
        cfg.runtimes.get_mut("runc").expect("runc").path = "/nonexistent/runc".into();
        let h = Handlers::new(&cfg, true);
        let e = h
            .get("runc")
            .expect("configured")
            .oci_request()
            .expect_err("missing");
        assert!(matches!(e, SandboxError::NotRunning(_)), "{e:?}");
        assert!(e.to_string().contains("/nonexistent/runc"), "{e}");
        // A handler whose runtime is not there is not offered.
        assert!(h.status(true, true).iter().all(|x| x.name != "runc"));
        assert_eq!(h.status(true, true)[0].name, "");
    }
}
