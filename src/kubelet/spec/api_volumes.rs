//! What a pod reads from the API server, as the kubelet's volume plugins
//! and env resolution provide it:
//!
//! - volumes `secret`, `configMap`, `downwardAPI` and `projected`
//!   (sources `serviceAccountToken`, `configMap`, `secret`, `downwardAPI`,
//!   which is how every pod gets its `kube-api-access-*` volume), written
//!   under `<pod dir>/volumes/kubernetes.io~<kind>/<name>/` by
//!   [`super::atomic_writer`]; secret and projected volumes on tmpfs.
//!   Every sync rewrites
//!   a volume whose content changed, so edits reach running containers;
//! - the secrets and config maps that env refers to are read here too
//!   ([`Objects::data`]; see `super::env::env_objects`).
//!
//! Service-account tokens come from the TokenRequest API, bound to the
//! pod, and are renewed after 80% of their lifetime. Without an API server
//! (static pods only) such references fail with a clear message.

use super::atomic_writer::Files;
use super::volumes;
use crate::kubelet::kit::defaults;
use crate::kubelet::kit::settings::Settings;
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, DownwardAPIVolumeFile, KeyToPath, Pod, Secret, ServiceAccount, Volume,
};
use kube::api::{Api, PostParams};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const DEFAULT_MODE: u32 = 0o644;
const TOKEN_SECONDS: i64 = 3607;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Secret,
    ConfigMap,
}

impl Kind {
    pub fn word(self) -> &'static str {
        match self {
            Kind::Secret => "secret",
            Kind::ConfigMap => "configmap",
        }
    }
}

type TokenKey = (String, String, String, i64, String);
type ServiceCache = HashMap<String, (Instant, Vec<k8s_openapi::api::core::v1::Service>)>;

/// Reads secrets and config maps and requests tokens.
#[derive(Default)]
pub struct Objects {
    client: Option<kube::Client>,
    tokens: Mutex<HashMap<TokenKey, (String, Instant, Duration)>>,
    services: Mutex<ServiceCache>,
}

impl Objects {
    pub fn new(client: Option<kube::Client>) -> Objects {
        Objects {
            client,
            tokens: Mutex::new(HashMap::new()),
            services: Mutex::new(HashMap::new()),
        }
    }

    /// The Services of a namespace (cached for 10 s; none without an API
    /// server, or when they cannot be listed: logged).
    pub async fn services(&self, ns: &str) -> Vec<k8s_openapi::api::core::v1::Service> {
        let Some(client) = self.client.clone() else {
            return Vec::new();
        };
        let lock = || self.services.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, v)) = lock().get(ns) {
            if at.elapsed() < Duration::from_secs(10) {
                return v.clone();
            }
        }
        let api: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(client, ns);
        match api.list(&Default::default()).await {
            Ok(l) => {
                lock().insert(ns.to_string(), (Instant::now(), l.items.clone()));
                l.items
            }
            Err(e) => {
                tracing::warn!(namespace = ns, error = %crate::kubelet::kit::api_error::describe(&e), "cannot list services for the pod's env");
                Vec::new()
            }
        }
    }

    pub(super) fn client(&self, what: &str) -> Result<kube::Client, String> {
        self.client.clone().ok_or_else(|| {
            format!("{what} needs an API server: run husk kubelet with --kubeconfig")
        })
    }

    /// An object's data (None: it does not exist).
    pub async fn data(
        &self,
        kind: Kind,
        ns: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, Vec<u8>>>, String> {
        let client = self.client(&format!("{} {name:?}", kind.word()))?;
        let r = match kind {
            Kind::Secret => Api::<Secret>::namespaced(client, ns)
                .get_opt(name)
                .await
                .map(|o| o.map(|s| data(s.string_data, s.data))),
            Kind::ConfigMap => Api::<ConfigMap>::namespaced(client, ns)
                .get_opt(name)
                .await
                .map(|o| o.map(|c| data(c.data, c.binary_data))),
        };
        r.map_err(|e| {
            format!(
                "cannot get {} {ns}/{name}: {}",
                kind.word(),
                crate::kubelet::kit::api_error::describe(&e)
            )
        })
    }

    /// A token of the pod's service account, bound to the pod.
    pub async fn token(&self, pod: &Pod, audience: &str, seconds: i64) -> Result<String, String> {
        let ns = defaults::namespace(pod).to_string();
        let sa = pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "default".into());
        let key = (
            ns.clone(),
            sa.clone(),
            audience.to_string(),
            seconds,
            defaults::uid(pod).to_string(),
        );
        if let Some((t, at, ttl)) = self.lock().get(&key) {
            if at.elapsed() < ttl.mul_f64(0.8) {
                return Ok(t.clone());
            }
        }
        let client = self.client("a service account token")?;
        let req = TokenRequest {
            spec: Some(TokenRequestSpec {
                audiences: (!audience.is_empty()).then(|| vec![audience.to_string()]),
                expiration_seconds: Some(seconds),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: Some(defaults::name(pod).into()),
                    uid: Some(defaults::uid(pod).into()),
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let r = Api::<ServiceAccount>::namespaced(client, &ns)
            .create_token_request(&sa, &PostParams::default(), &req)
            .await
            .map_err(|e| {
                format!(
                    "cannot get a token for service account {ns}/{sa}: {}",
                    crate::kubelet::kit::api_error::describe(&e)
                )
            })?;
        let token = r
            .status
            .and_then(|s| s.token)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                format!("service account {ns}/{sa}: the token request returned no token")
            })?;
        self.lock().insert(
            key,
            (
                token.clone(),
                Instant::now(),
                Duration::from_secs(seconds.max(60) as u64),
            ),
        );
        Ok(token)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TokenKey, (String, Instant, Duration)>> {
        self.tokens.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Forgets a pod's tokens.
    pub fn forget_pod(&self, uid: &str) {
        self.lock().retain(|k, _| k.4 != uid);
    }
}

/// An object's text and binary data as one map (binary wins a clash).
fn data(
    text: Option<BTreeMap<String, String>>,
    binary: Option<BTreeMap<String, k8s_openapi::ByteString>>,
) -> BTreeMap<String, Vec<u8>> {
    let mut d: BTreeMap<String, Vec<u8>> = text
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.into_bytes()))
        .collect();
    d.extend(
        binary
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0)),
    );
    d
}

fn mode(m: Option<i32>, default: u32) -> u32 {
    m.map(|m| m as u32 & 0o777).unwrap_or(default)
}

/// The keys of `data` a volume projects (`items`, or every key).
fn project(
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&[KeyToPath]>,
    default_mode: u32,
    optional: bool,
    what: &str,
    out: &mut Files,
) -> Result<(), String> {
    match items.filter(|i| !i.is_empty()) {
        None => {
            for (k, v) in data {
                out.insert(k.clone(), (v.clone(), default_mode));
            }
        }
        Some(items) => {
            for it in items {
                match data.get(&it.key) {
                    Some(v) => {
                        out.insert(it.path.clone(), (v.clone(), mode(it.mode, default_mode)));
                    }
                    None if optional => {}
                    None => return Err(format!("{what} references non-existent key: {}", it.key)),
                }
            }
        }
    }
    Ok(())
}

async fn object(
    objs: &Objects,
    kind: Kind,
    ns: &str,
    name: &str,
    optional: bool,
) -> Result<BTreeMap<String, Vec<u8>>, String> {
    match objs.data(kind, ns, name).await? {
        Some(d) => Ok(d),
        None if optional => Ok(BTreeMap::new()),
        None => Err(format!("{} {name:?} not found", kind.word())),
    }
}

/// An object's keys into `out` (`items`, or every key); a missing object
/// or key fails unless `optional`.
#[allow(clippy::too_many_arguments)]
async fn project_object(
    objs: &Objects,
    kind: Kind,
    ns: &str,
    name: &str,
    items: Option<&[KeyToPath]>,
    mode: u32,
    optional: Option<bool>,
    out: &mut Files,
) -> Result<(), String> {
    let optional = optional.unwrap_or(false);
    let d = object(objs, kind, ns, name, optional).await?;
    let what = format!("{} {name:?}", kind.word());
    project(&d, items, mode, optional, &what, out)
}

fn downward(
    settings: &Settings,
    pod: &Pod,
    items: &[DownwardAPIVolumeFile],
    default_mode: u32,
    out: &mut Files,
) -> Result<(), String> {
    for it in items {
        let v = if let Some(f) = &it.field_ref {
            super::downward::pod_field(
                pod,
                &f.field_path,
                &[],
                settings.node_ip.as_deref().unwrap_or(""),
            )
        } else if let Some(r) = &it.resource_field_ref {
            let name = r.container_name.clone().unwrap_or_default();
            let c = defaults::containers(pod)
                .iter()
                .chain(defaults::init_containers(pod))
                .find(|c| c.name == name)
                .ok_or_else(|| format!("downwardAPI {}: no container {name:?}", it.path))?;
            super::downward::resource_value(
                settings,
                c,
                &r.resource,
                r.divisor.as_ref().map(|d| d.0.as_str()),
            )
        } else {
            continue;
        };
        out.insert(
            it.path.clone(),
            (v.into_bytes(), mode(it.mode, default_mode)),
        );
    }
    Ok(())
}

/// A volume's files and its directory kind; None for volumes that are
/// not this module's (emptyDir, hostPath).
pub async fn volume_files(
    objs: &Objects,
    settings: &Settings,
    pod: &Pod,
    v: &Volume,
) -> Result<Option<(&'static str, Files)>, String> {
    let ns = defaults::namespace(pod);
    let mut out = Files::new();
    if let Some(s) = &v.secret {
        let name = s.secret_name.clone().unwrap_or_default();
        let m = mode(s.default_mode, DEFAULT_MODE);
        let items = s.items.as_deref();
        project_object(
            objs,
            Kind::Secret,
            ns,
            &name,
            items,
            m,
            s.optional,
            &mut out,
        )
        .await?;
        return Ok(Some(("kubernetes.io~secret", out)));
    }
    if let Some(c) = &v.config_map {
        let m = mode(c.default_mode, DEFAULT_MODE);
        let items = c.items.as_deref();
        project_object(
            objs,
            Kind::ConfigMap,
            ns,
            &c.name,
            items,
            m,
            c.optional,
            &mut out,
        )
        .await?;
        return Ok(Some(("kubernetes.io~configmap", out)));
    }
    if let Some(d) = &v.downward_api {
        let m = mode(d.default_mode, DEFAULT_MODE);
        downward(
            settings,
            pod,
            d.items.as_deref().unwrap_or_default(),
            m,
            &mut out,
        )?;
        return Ok(Some(("kubernetes.io~downward-api", out)));
    }
    if let Some(p) = &v.projected {
        let m = mode(p.default_mode, DEFAULT_MODE);
        for src in p.sources.iter().flatten() {
            if let Some(t) = &src.service_account_token {
                let token = objs
                    .token(
                        pod,
                        t.audience.as_deref().unwrap_or(""),
                        t.expiration_seconds.unwrap_or(TOKEN_SECONDS),
                    )
                    .await?;
                out.insert(t.path.clone(), (token.into_bytes(), m));
            }
            if let Some(c) = &src.config_map {
                let items = c.items.as_deref();
                project_object(
                    objs,
                    Kind::ConfigMap,
                    ns,
                    &c.name,
                    items,
                    m,
                    c.optional,
                    &mut out,
                )
                .await?;
            }
            if let Some(s) = &src.secret {
                let items = s.items.as_deref();
                project_object(
                    objs,
                    Kind::Secret,
                    ns,
                    &s.name,
                    items,
                    m,
                    s.optional,
                    &mut out,
                )
                .await?;
            }
            if let Some(d) = &src.downward_api {
                downward(
                    settings,
                    pod,
                    d.items.as_deref().unwrap_or_default(),
                    m,
                    &mut out,
                )?;
            }
        }
        return Ok(Some(("kubernetes.io~projected", out)));
    }
    Ok(None)
}

/// The directory kinds of the volumes this module writes.
const KINDS: [&str; 4] = [
    "kubernetes.io~secret",
    "kubernetes.io~configmap",
    "kubernetes.io~projected",
    "kubernetes.io~downward-api",
];

/// Whether a volume path is one of this module's (mounted read-only).
pub fn read_only(path: &std::path::Path) -> bool {
    path.parent()
        .and_then(|p| p.file_name())
        .is_some_and(|k| KINDS.iter().any(|x| k == *x))
}

/// Sets up every API-backed volume of the pod; returns name → host path.
pub async fn setup(
    objs: &Objects,
    settings: &Settings,
    pod: &Pod,
) -> Result<HashMap<String, PathBuf>, volumes::VolumeError> {
    let dir = volumes::pod_dir(settings, defaults::uid(pod)).join("volumes");
    let mut out = HashMap::new();
    for v in pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
    {
        let fail = |message: String| volumes::VolumeError::Setup {
            volume: v.name.clone(),
            message,
        };
        let Some((kind, files)) = volume_files(objs, settings, pod, v).await.map_err(fail)? else {
            continue;
        };
        let p = dir.join(kind).join(&v.name);
        std::fs::create_dir_all(&p).map_err(|e| fail(format!("create {}: {e}", p.display())))?;
        if matches!(kind, "kubernetes.io~secret" | "kubernetes.io~projected")
            && !volumes::is_mountpoint(&p)
        {
            rustix::mount::mount(
                "tmpfs",
                &p,
                "tmpfs",
                rustix::mount::MountFlags::empty(),
                Some(c"mode=0755"),
            )
            .map_err(|e| fail(format!("mount tmpfs at {}: {e}", p.display())))?;
        }
        super::atomic_writer::write(&p, &files).map_err(|e| fail(e.to_string()))?;
        out.insert(v.name.clone(), p);
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn items_select_keys_and_missing_keys_fail_unless_optional() {
        let data: BTreeMap<String, Vec<u8>> = [
            ("k1".to_string(), b"v1".to_vec()),
            ("k2".to_string(), b"v2".to_vec()),
        ]
        .into();
        let mut out = Files::new();
        project(&data, None, 0o644, false, "secret \"s\"", &mut out).unwrap();
        assert_eq!(out.len(), 2);
        let items = vec![KeyToPath {
            key: "k2".into(),
            path: "sub/file".into(),
            mode: Some(0o400),
            ..Default::default()
        }];
        let mut out = Files::new();
        project(&data, Some(&items), 0o644, false, "secret \"s\"", &mut out).unwrap();
        assert_eq!(out["sub/file"], (b"v2".to_vec(), 0o400));
        let missing = vec![KeyToPath {
            key: "nope".into(),
            path: "x".into(),
            mode: None,
            ..Default::default()
        }];
        let e = project(
            &data,
            Some(&missing),
            0o644,
            false,
            "secret \"s\"",
            &mut Files::new(),
        )
        .unwrap_err();
        assert!(e.contains("non-existent key: nope"), "{e}");
        project(
            &data,
            Some(&missing),
            0o644,
            true,
            "secret \"s\"",
            &mut Files::new(),
        )
        .unwrap();
    }
}
