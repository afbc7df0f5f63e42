//! Image pull secrets: the pod's `imagePullSecrets` (Secrets of type
//! `kubernetes.io/dockerconfigjson` or `dockercfg`) give the credentials
//! passed to PullImage, as the kubelet's keyring does: the first entry
//! whose registry matches the image's. A secret that cannot be read is
//! logged and skipped (the pull goes on without it), as in the kubelet.

use super::api_volumes::Kind;
use crate::api::cri::AuthConfig;
use crate::kubelet::kit::defaults;
use k8s_openapi::api::core::v1::Pod;

/// The registry host a dockerconfig key names: `https://host[:port]/v1/`,
/// `host[:port]`, `index.docker.io` → `docker.io`.
fn key_host(key: &str) -> String {
    let k = key
        .trim_start_matches("https://")
        .trim_start_matches("http://");
    let host = k.split('/').next().unwrap_or("").to_lowercase();
    match host.as_str() {
        "index.docker.io" | "registry-1.docker.io" | "registry.hub.docker.com" => {
            "docker.io".into()
        }
        _ => host,
    }
}

/// The credentials in a dockerconfig(json) document for `host`.
pub fn find(doc: &[u8], host: &str) -> Option<AuthConfig> {
    let v: serde_json::Value = serde_json::from_slice(doc).ok()?;
    let auths = v.get("auths").unwrap_or(&v).as_object()?;
    let (_, e) = auths.iter().find(|(k, _)| key_host(k) == host)?;
    let s = |k: &str| e.get(k).and_then(|x| x.as_str()).unwrap_or("").to_string();
    Some(AuthConfig {
        username: s("username"),
        password: s("password"),
        auth: s("auth"),
        identity_token: s("identitytoken"),
        registry_token: s("registrytoken"),
        ..Default::default()
    })
}

/// The credentials for pulling `image` for `pod` (None: none apply).
pub async fn auth(
    objects: &super::api_volumes::Objects,
    pod: &Pod,
    image: &str,
) -> Option<AuthConfig> {
    let secrets = pod.spec.as_ref()?.image_pull_secrets.as_ref()?;
    let host = crate::reference::Reference::parse(image)
        .ok()?
        .domain
        .to_lowercase();
    for s in secrets {
        let name = s.name.clone();
        match objects
            .data(Kind::Secret, defaults::namespace(pod), &name)
            .await
        {
            Ok(Some(d)) => {
                let doc = d.get(".dockerconfigjson").or_else(|| d.get(".dockercfg"));
                if let Some(a) = doc.and_then(|doc| find(doc, &host)) {
                    return Some(a);
                }
            }
            Ok(None) => {
                tracing::warn!(pod = %defaults::full_name(pod), secret = %name, "image pull secret not found; pulling without it")
            }
            Err(e) => {
                tracing::warn!(pod = %defaults::full_name(pod), secret = %name, error = %e, "image pull secret unreadable; pulling without it")
            }
        }
    }
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn dockerconfig_entries_match_by_registry_host() {
        let json = br#"{"auths": {"https://index.docker.io/v1/": {"auth": "dTpw"},
                        "registry.local:5000": {"username": "u", "password": "p"}}}"#;
        assert_eq!(find(json, "docker.io").unwrap().auth, "dTpw");
        let a = find(json, "registry.local:5000").unwrap();
        assert_eq!((a.username.as_str(), a.password.as_str()), ("u", "p"));
        assert!(find(json, "quay.io").is_none());
        // The older .dockercfg form has no "auths" level.
        assert!(find(br#"{"quay.io": {"auth": "eA=="}}"#, "quay.io").is_some());
        assert!(find(b"not json", "quay.io").is_none());
    }
}
