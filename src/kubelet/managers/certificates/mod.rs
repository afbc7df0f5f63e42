//! The certificate manager: the kubelet's client certificate, from TLS
//! bootstrap to rotation.
//!
//! - **Bootstrap** (`--bootstrap-kubeconfig`, before anything joins):
//!   when `--kubeconfig` is missing or its certificate has expired, a
//!   valid `kubelet-client-current.pem` in `--cert-dir` is used, or else a
//!   new one is asked for with the bootstrap credential (`csr`); the
//!   kubeconfig is then written to point at it. An API server that cannot
//!   be reached, or a request denied or never issued, refuses the start.
//! - **Rotation** (`--rotate-certificates`): at a random point between
//!   70% and 90% of the certificate's life, a new key and certificate are
//!   asked for with the current one (the controller-manager approves a
//!   node renewing itself), saved, and swapped into [`store::Identity`],
//!   which every new connection presents; failures are retried, backing
//!   off to 128 s.
//! - **Serving certificate** (`--rotate-server-certificates`): the kubelet
//!   API's certificate is asked for the same way (signer
//!   `kubernetes.io/kubelet-serving`, which a cluster administrator or an
//!   approver must approve), at start when none is issued yet (the
//!   self-signed or given pair serves meanwhile), then rotated likewise.

pub mod csr;
pub mod store;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use store::{Identity, Pair};

/// How long a bootstrap waits for its certificate.
pub const BOOTSTRAP_TIMEOUT: Duration = Duration::from_secs(600);

/// The client certificate and key of a kubeconfig's current user (PEM).
pub fn client_pem(kubeconfig: &Path) -> Result<Option<String>, String> {
    let text = std::fs::read_to_string(kubeconfig)
        .map_err(|e| format!("kubeconfig {}: {e}", kubeconfig.display()))?;
    let kc: serde_json::Value = serde_yaml::from_str(&text)
        .map_err(|e| format!("kubeconfig {}: {e}", kubeconfig.display()))?;
    let named = |list: &str, name: &serde_json::Value, field: &str| {
        kc[list]
            .as_array()
            .and_then(|l| l.iter().find(|e| &e["name"] == name))
            .map(|e| e[field].clone())
            .unwrap_or_default()
    };
    let ctx = named("contexts", &kc["current-context"], "context");
    let user = named("users", &ctx["user"], "user");
    let read = |data: &str, file: &str| -> Result<Option<String>, String> {
        if let Some(d) = user[data].as_str() {
            use base64::Engine;
            let b = base64::engine::general_purpose::STANDARD
                .decode(d.trim())
                .map_err(|e| format!("kubeconfig {}: {data}: {e}", kubeconfig.display()))?;
            return Ok(Some(String::from_utf8_lossy(&b).into_owned()));
        }
        match user[file].as_str() {
            Some(f) => {
                let p = kubeconfig.parent().unwrap_or(Path::new("/")).join(f);
                std::fs::read_to_string(&p)
                    .map(Some)
                    .map_err(|e| format!("{}: {e}", p.display()))
            }
            None => Ok(None),
        }
    };
    let cert = read("client-certificate-data", "client-certificate")?;
    let key = read("client-key-data", "client-key")?;
    Ok(match (cert, key) {
        (Some(c), Some(k)) if c == k => Some(c),
        (Some(c), Some(k)) => Some(format!("{c}{k}")),
        _ => None,
    })
}

/// Whether the kubeconfig can be used as it is: it exists, and its
/// client certificate (if it has one) has not expired.
fn usable(kubeconfig: &Path) -> bool {
    if !kubeconfig.exists() {
        return false;
    }
    match client_pem(kubeconfig) {
        Ok(Some(pem)) => Pair::parse(&pem).is_ok_and(|p| p.valid_now()),
        Ok(None) => true,
        Err(_) => false,
    }
}

/// Writes a kubeconfig for the bootstrap kubeconfig's cluster that
/// authenticates with `<dir>/kubelet-client-current.pem`.
fn write_kubeconfig(kubeconfig: &Path, bootstrap: &Path, dir: &Path) -> Result<(), String> {
    let b = kube::config::Kubeconfig::read_from(bootstrap)
        .map_err(|e| format!("bootstrap kubeconfig {}: {e}", bootstrap.display()))?;
    let cluster_name = b
        .contexts
        .iter()
        .find(|c| Some(&c.name) == b.current_context.as_ref())
        .and_then(|c| c.context.as_ref())
        .map(|c| c.cluster.clone())
        .unwrap_or_default();
    let cluster = b
        .clusters
        .iter()
        .find(|c| c.name == cluster_name)
        .and_then(|c| c.cluster.clone())
        .ok_or_else(|| {
            format!(
                "bootstrap kubeconfig {}: no current cluster",
                bootstrap.display()
            )
        })?;
    let mut c = serde_json::json!({"server": cluster.server});
    if let Some(d) = &cluster.certificate_authority_data {
        c["certificate-authority-data"] = d.clone().into();
    } else if let Some(f) = &cluster.certificate_authority {
        let abs = bootstrap.parent().unwrap_or(Path::new("/")).join(f);
        c["certificate-authority"] = abs.display().to_string().into();
    }
    let current = dir.join(store::current("client")).display().to_string();
    let kc = serde_json::json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "default-cluster", "cluster": c}],
        "contexts": [{"name": "default-context", "context": {"cluster": "default-cluster", "user": "default-auth", "namespace": "default"}}],
        "current-context": "default-context",
        "users": [{"name": "default-auth", "user": {"client-certificate": current, "client-key": current}}],
    });
    let text = serde_yaml::to_string(&kc).map_err(|e| e.to_string())?;
    if let Some(p) = kubeconfig.parent() {
        std::fs::create_dir_all(p).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    let tmp = kubeconfig.with_extension("tmp");
    std::fs::write(&tmp, text)
        .and_then(|_| std::fs::rename(&tmp, kubeconfig))
        .map_err(|e| format!("{}: {e}", kubeconfig.display()))
}

/// TLS bootstrap: leaves `kubeconfig` usable, or says why it cannot.
pub async fn bootstrap(
    kubeconfig: &Path,
    bootstrap: &Path,
    dir: &Path,
    node: &str,
    timeout: Duration,
) -> Result<(), String> {
    if usable(kubeconfig) {
        return Ok(());
    }
    if store::load_current(dir, "client").is_some_and(|p| p.valid_now()) {
        tracing::info!(cert = %dir.join(store::current("client")).display(), "using the client certificate already issued");
        return write_kubeconfig(kubeconfig, bootstrap, dir);
    }
    let kc = kube::config::Kubeconfig::read_from(bootstrap)
        .map_err(|e| format!("bootstrap kubeconfig {}: {e}", bootstrap.display()))?;
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .map_err(|e| format!("bootstrap kubeconfig {}: {e}", bootstrap.display()))?;
    cfg.connect_timeout = Some(Duration::from_secs(10));
    cfg.default_retry = false;
    let url = cfg.cluster_url.clone();
    let client = kube::Client::try_from(cfg)
        .map_err(|e| format!("bootstrap kubeconfig {}: {e}", bootstrap.display()))?;
    tracing::info!(server = %url, node, "TLS bootstrap: asking for a client certificate");
    let pem = csr::obtain(client, node, &csr::Kind::Client, timeout)
        .await
        .map_err(|e| {
            format!(
                "TLS bootstrap with {} against {url}: {e}",
                bootstrap.display()
            )
        })?;
    Pair::parse(&pem).map_err(|e| format!("TLS bootstrap: the issued certificate: {e}"))?;
    store::save(dir, "client", &pem).map_err(|e| format!("{}: {e}", dir.display()))?;
    write_kubeconfig(kubeconfig, bootstrap, dir)?;
    tracing::info!(kubeconfig = %kubeconfig.display(), "TLS bootstrap done");
    Ok(())
}

/// Rotates a certificate of `kind` before it expires, until aborted;
/// with `now`, the first is asked for at once (none is issued yet).
pub async fn rotate(
    client: kube::Client,
    identity: Arc<Identity>,
    dir: std::path::PathBuf,
    node: String,
    kind: csr::Kind,
    now: bool,
) {
    let mut first = now;
    loop {
        if !std::mem::take(&mut first) {
            let pair = identity.pair();
            let at = pair.rotate_at(0.7 + rand::random::<f64>() * 0.2);
            let wait = at.duration_since(SystemTime::now()).unwrap_or_default();
            tracing::info!(kind = kind.name(), subject = %pair.subject, rotate_in = ?wait, "certificate rotation scheduled");
            tokio::time::sleep(wait).await;
        }
        let mut backoff = Duration::from_secs(1);
        loop {
            let done = async {
                let pem = csr::obtain(client.clone(), &node, &kind, BOOTSTRAP_TIMEOUT).await?;
                let p = Pair::parse(&pem)?;
                store::save(&dir, kind.name(), &pem)
                    .map_err(|e| format!("{}: {e}", dir.display()))?;
                identity.set(p)
            }
            .await;
            match done {
                Ok(()) => {
                    let expires = k8s_openapi::jiff::Timestamp::try_from(identity.pair().not_after)
                        .map(|t| t.to_string())
                        .unwrap_or_default();
                    tracing::info!(kind = kind.name(), %expires, "certificate rotated");
                    break;
                }
                Err(e) => {
                    tracing::warn!(kind = kind.name(), error = %e, retry_in = ?backoff, "certificate rotation failed");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(128));
                }
            }
        }
    }
}
