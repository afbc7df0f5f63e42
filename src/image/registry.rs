//! The registry HTTP client (distribution API v2): manifests and blobs from
//! the endpoints that `hosts.toml` lists, with authentication.
//!
//! Endpoints are tried in order (mirrors, then upstream); a manifest by tag
//! only from endpoints with the `resolve` capability, anything by digest from
//! those with `pull`. A mirror request carries `?ns=<upstream host>`, as
//! containerd sends. Bearer tokens are cached per realm, service and scope
//! until they expire.

use super::auth::{parse_challenge, Credentials, TokenResponse};
use super::error::ImageError;
use super::hosts::{self, Endpoint};
use crate::reference::Reference;
use reqwest::header::{HeaderMap, HeaderValue, ACCEPT, AUTHORIZATION, WWW_AUTHENTICATE};
use reqwest::{Method, Response, StatusCode};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Manifests larger than this are refused.
const MAX_MANIFEST: usize = 8 << 20;

/// A fetched manifest document.
#[derive(Debug, Clone)]
pub struct FetchedManifest {
    pub body: Vec<u8>,
    pub content_type: Option<String>,
    pub digest: String,
}

#[derive(Hash, PartialEq, Eq, Clone)]
struct ClientKey {
    skip_verify: bool,
    ca: Vec<PathBuf>,
    client: Vec<(PathBuf, Option<PathBuf>)>,
}

/// (endpoint url, scope, credentials fingerprint) of a cached token.
type TokenKey = (String, String, String);

/// Talks to registries; shared by all pulls.
pub struct RegistryClient {
    /// The hosts.toml dir (changed by a reload).
    config_dir: std::sync::RwLock<PathBuf>,
    clients: Mutex<HashMap<ClientKey, reqwest::Client>>,
    tokens: Mutex<HashMap<TokenKey, (String, Instant)>>,
}

impl RegistryClient {
    pub fn new(config_dir: PathBuf) -> RegistryClient {
        RegistryClient {
            config_dir: std::sync::RwLock::new(config_dir),
            clients: Mutex::new(HashMap::new()),
            tokens: Mutex::new(HashMap::new()),
        }
    }

    /// Reads hosts.toml files from `dir` from now on.
    pub fn set_config_dir(&self, dir: PathBuf) {
        *self.config_dir.write().unwrap_or_else(|p| p.into_inner()) = dir;
    }

    fn client(&self, ep: &Endpoint) -> Result<reqwest::Client, ImageError> {
        let key = ClientKey {
            skip_verify: ep.skip_verify,
            ca: ep.ca.clone(),
            client: ep.client.clone(),
        };
        let mut clients = self
            .clients
            .lock()
            .map_err(|_| ImageError::Internal("registry client cache poisoned".into()))?;
        if let Some(c) = clients.get(&key) {
            return Ok(c.clone());
        }
        let mut b = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(30))
            .pool_idle_timeout(Duration::from_secs(90))
            .user_agent(concat!("husk/", env!("CARGO_PKG_VERSION")))
            .danger_accept_invalid_certs(ep.skip_verify);
        for ca in &ep.ca {
            let pem = std::fs::read(ca)
                .map_err(|e| ImageError::io(format!("read ca {}", ca.display()), e))?;
            let cert = reqwest::Certificate::from_pem(&pem)
                .map_err(|e| ImageError::Config(format!("ca {}: {e}", ca.display())))?;
            b = b.add_root_certificate(cert);
        }
        if let Some((cert, key_path)) = ep.client.first() {
            let mut pem = std::fs::read(cert)
                .map_err(|e| ImageError::io(format!("read client cert {}", cert.display()), e))?;
            if let Some(k) = key_path {
                pem.extend(
                    std::fs::read(k).map_err(|e| {
                        ImageError::io(format!("read client key {}", k.display()), e)
                    })?,
                );
            }
            let id = reqwest::Identity::from_pem(&pem)
                .map_err(|e| ImageError::Config(format!("client cert {}: {e}", cert.display())))?;
            b = b.identity(id);
        }
        let c = b
            .build()
            .map_err(|e| ImageError::Config(format!("http client: {e}")))?;
        clients.insert(key, c.clone());
        Ok(c)
    }

    /// Fetches a manifest (by tag or digest) from the first endpoint that
    /// has it; verifies the digest when asked by digest.
    pub async fn fetch_manifest(
        &self,
        r: &Reference,
        object: &str,
        creds: &Credentials,
    ) -> Result<FetchedManifest, ImageError> {
        let by_digest = object.contains(':');
        let resp = self
            .get_first(
                r,
                "manifests",
                object,
                super::manifest::MANIFEST_ACCEPT,
                creds,
                |ep| {
                    if by_digest {
                        ep.pull
                    } else {
                        ep.resolve
                    }
                },
            )
            .await?;
        let content_type = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        if resp.content_length().unwrap_or(0) as usize > MAX_MANIFEST {
            return Err(ImageError::Invalid(format!(
                "manifest {r} is larger than {MAX_MANIFEST} bytes"
            )));
        }
        let url = resp.url().to_string();
        let body = resp
            .bytes()
            .await
            .map_err(|e| ImageError::Transport {
                url,
                message: e.to_string(),
            })?
            .to_vec();
        if body.len() > MAX_MANIFEST {
            return Err(ImageError::Invalid(format!(
                "manifest {r} is larger than {MAX_MANIFEST} bytes"
            )));
        }
        let digest = if by_digest {
            let mut h = super::content::Hasher::for_digest(object)?;
            h.update(&body);
            let actual = h.finish();
            if actual != object {
                return Err(ImageError::DigestMismatch {
                    expected: object.to_string(),
                    actual,
                });
            }
            actual
        } else {
            super::content::sha256_digest(&body)
        };
        Ok(FetchedManifest {
            body,
            content_type,
            digest,
        })
    }

    /// Opens a blob for streaming from the first endpoint that serves it.
    pub async fn open_blob(
        &self,
        r: &Reference,
        digest: &str,
        creds: &Credentials,
    ) -> Result<Response, ImageError> {
        self.get_first(r, "blobs", digest, "*/*", creds, |ep| ep.pull)
            .await
    }

    async fn get_first(
        &self,
        r: &Reference,
        kind: &str,
        object: &str,
        accept: &str,
        creds: &Credentials,
        usable: impl Fn(&Endpoint) -> bool,
    ) -> Result<Response, ImageError> {
        let eps: Vec<Endpoint> = hosts::endpoints(
            &self.config_dir.read().unwrap_or_else(|p| p.into_inner()),
            &r.domain,
        )?
        .into_iter()
        .filter(|e| usable(e))
        .collect();
        if eps.is_empty() {
            return Err(ImageError::Config(format!(
                "no registry host for {} may serve {kind} (check capabilities in hosts.toml)",
                r.domain
            )));
        }
        let mut last = None;
        for ep in &eps {
            let mut url = format!("{}/{}/{kind}/{object}", ep.api_root(), r.path);
            if let Some(ns) = &ep.mirror_of {
                url = format!("{url}?ns={ns}");
            }
            match self.get(ep, &url, accept, r, creds).await {
                Ok(resp) => return Ok(resp),
                Err(e) => {
                    tracing::debug!(url = %url, error = %e, "registry endpoint failed; trying the next");
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| ImageError::NotFound(format!("{r}"))))
    }

    /// One GET with the challenge/token dance.
    async fn get(
        &self,
        ep: &Endpoint,
        url: &str,
        accept: &str,
        r: &Reference,
        creds: &Credentials,
    ) -> Result<Response, ImageError> {
        let client = self.client(ep)?;
        let scope = format!("repository:{}:pull", r.path);
        let cred_key = format!(
            "{}\0{}\0{}",
            creds.username, creds.identity_token, creds.registry_token
        );
        let cache_key = (ep.url.clone(), scope.clone(), cred_key);
        let mut auth = if !creds.registry_token.is_empty() {
            Some(format!("Bearer {}", creds.registry_token))
        } else {
            self.cached_token(&cache_key)
        };
        for attempt in 0..2 {
            let resp = self.send(&client, ep, url, accept, auth.as_deref()).await?;
            match resp.status() {
                s if s.is_success() => return Ok(resp),
                StatusCode::UNAUTHORIZED if attempt == 0 => {
                    let challenge = resp
                        .headers()
                        .get_all(WWW_AUTHENTICATE)
                        .iter()
                        .filter_map(|v| v.to_str().ok())
                        .filter_map(parse_challenge)
                        .find(|c| c.scheme == "bearer" || c.scheme == "basic");
                    auth = match challenge {
                        Some(c) if c.scheme == "basic" => match creds.basic_header() {
                            Some(h) => Some(h),
                            None => {
                                return Err(ImageError::Unauthenticated(format!(
                                    "{url}: the registry requires credentials and none were given"
                                )))
                            }
                        },
                        Some(c) => {
                            let (h, ttl) = self.fetch_token(&client, &c, &scope, creds).await?;
                            self.store_token(cache_key.clone(), h.clone(), ttl);
                            Some(h)
                        }
                        None => {
                            return Err(ImageError::Unauthenticated(format!(
                                "{url}: 401 without a usable WWW-Authenticate challenge"
                            )))
                        }
                    };
                }
                status => return Err(status_error(url, status, r, resp).await),
            }
        }
        Err(ImageError::Unauthenticated(format!(
            "{url}: credentials were refused"
        )))
    }

    async fn send(
        &self,
        client: &reqwest::Client,
        ep: &Endpoint,
        url: &str,
        accept: &str,
        auth: Option<&str>,
    ) -> Result<Response, ImageError> {
        let mut headers = HeaderMap::new();
        headers.insert(
            ACCEPT,
            HeaderValue::from_str(accept).map_err(|e| ImageError::Internal(e.to_string()))?,
        );
        for (k, v) in &ep.header {
            let name = reqwest::header::HeaderName::from_bytes(k.as_bytes())
                .map_err(|e| ImageError::Config(format!("header {k:?}: {e}")))?;
            let value = HeaderValue::from_str(v)
                .map_err(|e| ImageError::Config(format!("header {k:?}: {e}")))?;
            headers.append(name, value);
        }
        if let Some(a) = auth {
            let mut v = HeaderValue::from_str(a).map_err(|_| {
                ImageError::InvalidCredentials("credentials contain invalid characters".into())
            })?;
            v.set_sensitive(true);
            headers.insert(AUTHORIZATION, v);
        }
        client
            .request(Method::GET, url)
            .headers(headers)
            .send()
            .await
            .map_err(|e| ImageError::Transport {
                url: url.to_string(),
                message: error_chain(&e),
            })
    }

    async fn fetch_token(
        &self,
        client: &reqwest::Client,
        c: &super::auth::Challenge,
        default_scope: &str,
        creds: &Credentials,
    ) -> Result<(String, Duration), ImageError> {
        let realm = c.param("realm").ok_or_else(|| {
            ImageError::Unauthenticated("bearer challenge without a realm".into())
        })?;
        let service = c.param("service").unwrap_or("");
        let scope = c.param("scope").unwrap_or(default_scope);
        let req = if !creds.identity_token.is_empty() {
            client.post(realm).form(&[
                ("grant_type", "refresh_token"),
                ("refresh_token", creds.identity_token.as_str()),
                ("service", service),
                ("scope", scope),
                ("client_id", "husk"),
            ])
        } else {
            let mut q = vec![("service", service)];
            if !scope.is_empty() {
                q.push(("scope", scope));
            }
            let mut req = client.get(realm).query(&q);
            if let Some(h) = creds.basic_header() {
                req = req.header(AUTHORIZATION, h);
            }
            req
        };
        let resp = req.send().await.map_err(|e| ImageError::Transport {
            url: realm.to_string(),
            message: error_chain(&e),
        })?;
        let status = resp.status();
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            return Err(ImageError::Unauthenticated(format!(
                "token service {realm} refused the credentials ({status})"
            )));
        }
        if !status.is_success() {
            return Err(ImageError::Registry {
                url: realm.to_string(),
                status: status.as_u16(),
                message: "token request failed".into(),
            });
        }
        let body = resp.bytes().await.map_err(|e| ImageError::Transport {
            url: realm.to_string(),
            message: error_chain(&e),
        })?;
        let tr: TokenResponse =
            serde_json::from_slice(&body).map_err(|e| ImageError::Registry {
                url: realm.to_string(),
                status: status.as_u16(),
                message: format!("bad token response: {e}"),
            })?;
        let token = tr.bearer().ok_or_else(|| {
            ImageError::Unauthenticated(format!("token service {realm} returned no token"))
        })?;
        let ttl = Duration::from_secs(tr.expires_in.unwrap_or(60).max(10));
        Ok((format!("Bearer {token}"), ttl))
    }

    fn cached_token(&self, key: &TokenKey) -> Option<String> {
        let tokens = self.tokens.lock().ok()?;
        tokens
            .get(key)
            .filter(|(_, exp)| *exp > Instant::now())
            .map(|(h, _)| h.clone())
    }

    fn store_token(&self, key: TokenKey, header: String, ttl: Duration) {
        if let Ok(mut tokens) = self.tokens.lock() {
            // Renew a little early so a token never expires mid-request.
            let exp = Instant::now() + ttl.saturating_sub(Duration::from_secs(5));
            tokens.insert(key, (header, exp));
        }
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

async fn status_error(url: &str, status: StatusCode, r: &Reference, resp: Response) -> ImageError {
    let body = resp.text().await.unwrap_or_default();
    let message: String = body.chars().take(300).collect();
    match status {
        StatusCode::NOT_FOUND => ImageError::NotFound(format!("{r}: not found at {url}")),
        StatusCode::UNAUTHORIZED => {
            ImageError::Unauthenticated(format!("{url}: credentials were refused"))
        }
        StatusCode::FORBIDDEN => ImageError::PermissionDenied(format!("{url}: access denied")),
        _ => ImageError::Registry {
            url: url.to_string(),
            status: status.as_u16(),
            message,
        },
    }
}
