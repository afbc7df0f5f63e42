//! Registry host configuration in containerd's `hosts.toml` format.
//!
//! `<config_dir>/<host[:port]>/hosts.toml` (falling back to
//! `<config_dir>/_default/hosts.toml`) lists mirrors as `[host."URL"]`
//! tables, tried in the order written, then the upstream `server`. Keys:
//! `capabilities` (`pull`, `resolve`, `push`), `skip_verify`, `ca`,
//! `client`, `header`, `override_path`. An endpoint URL with `http://` is
//! plain HTTP. Without a file, the upstream is `https://<host>`
//! (`registry-1.docker.io` for docker.io), or plain HTTP for loopback hosts.

use super::error::ImageError;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One place to fetch from.
#[derive(Debug, Clone, PartialEq)]
pub struct Endpoint {
    /// scheme://host[:port][/path], without the `/v2` suffix.
    pub url: String,
    /// May fetch manifests by tag.
    pub resolve: bool,
    /// May fetch blobs and manifests by digest.
    pub pull: bool,
    pub skip_verify: bool,
    pub ca: Vec<PathBuf>,
    /// Client certificate and key (PEM files).
    pub client: Vec<(PathBuf, Option<PathBuf>)>,
    pub header: Vec<(String, String)>,
    /// The URL already includes the API root (no `/v2` is added).
    pub override_path: bool,
    /// A mirror of `upstream` (requests carry `?ns=<upstream>`).
    pub mirror_of: Option<String>,
}

impl Endpoint {
    /// The API root: `<url>/v2` unless `override_path`.
    pub fn api_root(&self) -> String {
        let base = self.url.trim_end_matches('/');
        if self.override_path {
            base.to_string()
        } else {
            format!("{base}/v2")
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HostsFile {
    server: Option<String>,
    #[serde(flatten)]
    upstream: HostFields,
    #[serde(default)]
    host: toml::value::Table,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HostFields {
    capabilities: Option<Vec<String>>,
    skip_verify: Option<bool>,
    ca: Option<OneOrMany>,
    client: Option<toml::Value>,
    header: Option<BTreeMap<String, OneOrMany>>,
    override_path: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
        }
    }
}

fn is_loopback(host: &str) -> bool {
    let h = host
        .rsplit_once(':')
        .filter(|(h, p)| p.parse::<u16>().is_ok() && !h.is_empty())
        .map(|(h, _)| h)
        .unwrap_or(host);
    h == "localhost" || h.starts_with("127.") || h == "[::1]" || h == "::1"
}

/// The default upstream URL for a registry host.
pub fn default_server(host: &str) -> String {
    if host == crate::reference::DOCKER_HUB {
        "https://registry-1.docker.io".to_string()
    } else if is_loopback(host) {
        format!("http://{host}")
    } else {
        format!("https://{host}")
    }
}

/// Reads the endpoints for `host`, mirrors first, upstream last.
pub fn endpoints(config_dir: &Path, host: &str) -> Result<Vec<Endpoint>, ImageError> {
    let mut candidates = vec![config_dir.join(host).join("hosts.toml")];
    // containerd accepts `host_port_` style too on platforms without ':';
    // on Linux the plain name is the convention, then the default.
    candidates.push(config_dir.join("_default").join("hosts.toml"));
    for path in candidates {
        match std::fs::read_to_string(&path) {
            Ok(text) => return parse(&text, host, &path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(ImageError::io(format!("read {}", path.display()), e)),
        }
    }
    Ok(vec![upstream(
        host,
        default_server(host),
        HostFields::default(),
    )?])
}

fn fields_into(
    url: String,
    f: HostFields,
    mirror_of: Option<String>,
    base: &Path,
) -> Result<Endpoint, ImageError> {
    let caps = f
        .capabilities
        .unwrap_or_else(|| vec!["pull".into(), "resolve".into(), "push".into()]);
    for c in &caps {
        if !matches!(c.as_str(), "pull" | "resolve" | "push") {
            return Err(ImageError::Config(format!(
                "{}: host {url:?}: unknown capability {c:?}",
                base.display()
            )));
        }
    }
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(ImageError::Config(format!(
            "{}: host {url:?} must start with http:// or https://",
            base.display()
        )));
    }
    let dir = base.parent().unwrap_or(Path::new("/"));
    let resolve_path = |p: String| {
        let p = PathBuf::from(p);
        if p.is_absolute() {
            p
        } else {
            dir.join(p)
        }
    };
    let client = match f.client {
        None => Vec::new(),
        Some(toml::Value::String(s)) => vec![(resolve_path(s), None)],
        Some(toml::Value::Array(items)) => {
            let mut out = Vec::new();
            for item in items {
                match item {
                    toml::Value::String(s) => out.push((resolve_path(s), None)),
                    toml::Value::Array(pair) if pair.len() == 2 => {
                        let s = |v: &toml::Value| v.as_str().map(str::to_string);
                        match (s(&pair[0]), s(&pair[1])) {
                            (Some(c), Some(k)) => {
                                out.push((resolve_path(c), Some(resolve_path(k))))
                            }
                            _ => {
                                return Err(ImageError::Config(format!(
                                    "{}: host {url:?}: client pairs must be strings",
                                    base.display()
                                )))
                            }
                        }
                    }
                    _ => {
                        return Err(ImageError::Config(format!(
                            "{}: host {url:?}: client must be a path or [cert, key] pairs",
                            base.display()
                        )))
                    }
                }
            }
            out
        }
        Some(_) => {
            return Err(ImageError::Config(format!(
                "{}: host {url:?}: client must be a path or [cert, key] pairs",
                base.display()
            )))
        }
    };
    Ok(Endpoint {
        resolve: caps.iter().any(|c| c == "resolve"),
        pull: caps.iter().any(|c| c == "pull"),
        skip_verify: f.skip_verify.unwrap_or(false),
        ca: f
            .ca
            .map(OneOrMany::into_vec)
            .unwrap_or_default()
            .into_iter()
            .map(resolve_path)
            .collect(),
        client,
        header: f
            .header
            .unwrap_or_default()
            .into_iter()
            .flat_map(|(k, v)| v.into_vec().into_iter().map(move |v| (k.clone(), v)))
            .collect(),
        override_path: f.override_path.unwrap_or(false),
        mirror_of,
        url,
    })
}

fn upstream(host: &str, server: String, f: HostFields) -> Result<Endpoint, ImageError> {
    let _ = host;
    fields_into(server, f, None, Path::new("/hosts.toml"))
}

/// Parses one `hosts.toml` for `host`: its mirrors in order, then the
/// upstream. `path` names the file in errors.
pub fn parse(text: &str, host: &str, path: &Path) -> Result<Vec<Endpoint>, ImageError> {
    let file: HostsFile = toml::from_str(text)
        .map_err(|e| ImageError::Config(format!("{}: {}", path.display(), e.message().trim())))?;
    let mut out = Vec::new();
    for (url, value) in file.host {
        let fields: HostFields = value.try_into().map_err(|e: toml::de::Error| {
            ImageError::Config(format!(
                "{}: host {url:?}: {}",
                path.display(),
                e.message().trim()
            ))
        })?;
        let url = if url.contains("://") {
            url
        } else {
            format!("https://{url}")
        };
        out.push(fields_into(url, fields, Some(host.to_string()), path)?);
    }
    let server = file.server.unwrap_or_else(|| default_server(host));
    out.push(fields_into(server, file.upstream, None, path)?);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mirrors_in_order_then_upstream() {
        let text = r#"
server = "https://registry.example.com"

[host."http://127.0.0.1:5001"]
  capabilities = ["pull", "resolve"]

[host."https://mirror.example.com/base"]
  capabilities = ["pull"]
  skip_verify = true
  override_path = true
  [host."https://mirror.example.com/base".header]
    x-custom = "1"
"#;
        let eps = parse(
            text,
            "registry.example.com",
            Path::new("/etc/h/r/hosts.toml"),
        )
        .expect("parses");
        assert_eq!(eps.len(), 3);
        assert_eq!(eps[0].url, "http://127.0.0.1:5001");
        assert!(eps[0].resolve && eps[0].pull);
        assert_eq!(eps[0].api_root(), "http://127.0.0.1:5001/v2");
        assert_eq!(eps[0].mirror_of.as_deref(), Some("registry.example.com"));
        assert!(!eps[1].resolve && eps[1].pull && eps[1].skip_verify);
        assert_eq!(eps[1].api_root(), "https://mirror.example.com/base");
        assert_eq!(
            eps[1].header,
            vec![("x-custom".to_string(), "1".to_string())]
        );
        assert_eq!(eps[2].url, "https://registry.example.com");
        assert_eq!(eps[2].mirror_of, None);
    }

    #[test]
    fn defaults_without_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let eps = endpoints(dir.path(), "docker.io").expect("default");
        assert_eq!(eps.len(), 1);
        assert_eq!(eps[0].url, "https://registry-1.docker.io");
        let eps = endpoints(dir.path(), "127.0.0.1:5000").expect("loopback");
        assert_eq!(eps[0].url, "http://127.0.0.1:5000");
        let eps = endpoints(dir.path(), "quay.io").expect("other");
        assert_eq!(eps[0].url, "https://quay.io");
    }

    #[test]
    fn bad_files_are_named() {
        let e = parse("bogus = 1", "h", Path::new("/d/h/hosts.toml")).expect_err("unknown");
        assert!(e.to_string().contains("/d/h/hosts.toml"), "{e}");
        let e = parse(
            "[host.\"http://m\"]\ncapabilities=[\"fly\"]",
            "h",
            Path::new("/x"),
        )
        .expect_err("capability");
        assert!(e.to_string().contains("fly"), "{e}");
    }
}
