//! Image references, parsed and normalized as kubelet and containerd do.
//!
//! `busybox` → `docker.io/library/busybox:latest`; `index.docker.io` is
//! `docker.io`; the first path component is a registry host when it contains
//! `.` or `:` or is `localhost`; a reference may carry a tag, a digest, or
//! both (`name:tag@sha256:…`, resolved by the digest). Grammar from the
//! distribution reference spec.

use std::fmt;

/// The default registry for names without a host.
pub const DOCKER_HUB: &str = "docker.io";

/// A parsed, normalized image reference.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reference {
    /// Registry host with optional port, e.g. `docker.io`, `127.0.0.1:5000`.
    pub domain: String,
    /// Repository path, e.g. `library/busybox`.
    pub path: String,
    pub tag: Option<String>,
    pub digest: Option<String>,
}

/// Why a reference did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid image reference {reference:?}: {reason}")]
pub struct ParseError {
    pub reference: String,
    pub reason: String,
}

fn err(reference: &str, reason: impl Into<String>) -> ParseError {
    ParseError {
        reference: reference.to_string(),
        reason: reason.into(),
    }
}

impl Reference {
    /// Parses and normalizes `s`; a reference without tag or digest gets
    /// `latest`.
    pub fn parse(s: &str) -> Result<Reference, ParseError> {
        let mut r = Reference::parse_name_only(s)?;
        if r.tag.is_none() && r.digest.is_none() {
            r.tag = Some("latest".to_string());
        }
        Ok(r)
    }

    /// Parses without adding a default tag (for matching `name` alone).
    pub fn parse_name_only(s: &str) -> Result<Reference, ParseError> {
        if s.is_empty() {
            return Err(err(s, "empty reference"));
        }
        if s.len() > 4096 {
            return Err(err(s, "reference too long"));
        }
        let (rest, digest) = match s.split_once('@') {
            Some((r, d)) => {
                validate_digest(d).map_err(|e| err(s, e))?;
                (r, Some(d.to_string()))
            }
            None => (s, None),
        };
        // The tag is after the last ':' that follows the last '/'.
        let last_slash = rest.rfind('/').map(|i| i + 1).unwrap_or(0);
        let (name, tag) = match rest[last_slash..].rfind(':') {
            Some(i) => {
                let t = &rest[last_slash + i + 1..];
                validate_tag(t).map_err(|e| err(s, e))?;
                (&rest[..last_slash + i], Some(t.to_string()))
            }
            None => (rest, None),
        };
        if name.is_empty() {
            return Err(err(s, "empty repository name"));
        }
        let (domain, path) = match name.split_once('/') {
            Some((first, remainder))
                if first.contains('.') || first.contains(':') || first == "localhost" =>
            {
                (first.to_string(), remainder.to_string())
            }
            _ => (DOCKER_HUB.to_string(), name.to_string()),
        };
        let domain = if domain == "index.docker.io" {
            DOCKER_HUB.to_string()
        } else {
            domain
        };
        validate_domain(&domain).map_err(|e| err(s, e))?;
        let path = if domain == DOCKER_HUB && !path.contains('/') {
            format!("library/{path}")
        } else {
            path
        };
        validate_path(&path).map_err(|e| err(s, e))?;
        if domain.len() + 1 + path.len() > 255 {
            return Err(err(s, "repository name longer than 255 characters"));
        }
        Ok(Reference {
            domain,
            path,
            tag,
            digest,
        })
    }

    /// `domain/path`, without tag or digest.
    pub fn name(&self) -> String {
        format!("{}/{}", self.domain, self.path)
    }

    /// `domain/path:tag`, if the reference has a tag.
    pub fn tagged(&self) -> Option<String> {
        self.tag.as_ref().map(|t| format!("{}:{t}", self.name()))
    }

    /// `domain/path@digest` for a given manifest digest.
    pub fn with_digest(&self, digest: &str) -> String {
        format!("{}@{digest}", self.name())
    }

    /// What to ask the registry for: the digest if there is one, else the tag.
    pub fn object(&self) -> &str {
        self.digest
            .as_deref()
            .or(self.tag.as_deref())
            .unwrap_or("latest")
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.name())?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

/// Checks `algorithm:hex` with the hex length the algorithm needs.
pub fn validate_digest(d: &str) -> Result<(), String> {
    let (alg, hex) = d
        .split_once(':')
        .ok_or_else(|| format!("digest {d:?} has no algorithm"))?;
    let want = match alg {
        "sha256" => 64,
        "sha512" => 128,
        _ => return Err(format!("unsupported digest algorithm {alg:?}")),
    };
    if hex.len() != want || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Err(format!("digest {d:?} is not {want} lowercase hex digits"));
    }
    Ok(())
}

fn validate_tag(t: &str) -> Result<(), String> {
    let ok = !t.is_empty()
        && t.len() <= 128
        && t.bytes().enumerate().all(|(i, b)| {
            b.is_ascii_alphanumeric() || b == b'_' || (i > 0 && (b == b'.' || b == b'-'))
        });
    if ok {
        Ok(())
    } else {
        Err(format!("invalid tag {t:?}"))
    }
}

fn validate_domain(d: &str) -> Result<(), String> {
    let (host, port) = match d.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || d.starts_with('[') => (h, Some(p)),
        _ => (d, None),
    };
    if let Some(p) = port {
        if p.is_empty() || p.parse::<u16>().is_err() {
            return Err(format!("invalid port in registry {d:?}"));
        }
    }
    let host_ok = if host.starts_with('[') && host.ends_with(']') {
        host[1..host.len() - 1]
            .parse::<std::net::Ipv6Addr>()
            .is_ok()
    } else {
        !host.is_empty()
            && host.split('.').all(|label| {
                !label.is_empty()
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                    && !label.starts_with('-')
                    && !label.ends_with('-')
            })
    };
    if host_ok {
        Ok(())
    } else {
        Err(format!("invalid registry host {d:?}"))
    }
}

fn validate_path(p: &str) -> Result<(), String> {
    for comp in p.split('/') {
        if comp.is_empty() {
            return Err(format!("empty path component in {p:?}"));
        }
        if comp.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err("repository name must be lowercase".to_string());
        }
        // alnum (separator alnum)*; separators: '.', '_', '__', '-'+
        let bytes = comp.as_bytes();
        let first_last_ok = bytes
            .first()
            .map(|b| b.is_ascii_alphanumeric())
            .unwrap_or(false)
            && bytes
                .last()
                .map(|b| b.is_ascii_alphanumeric())
                .unwrap_or(false);
        let chars_ok = bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        let seps_ok = !comp.contains("..") && !comp.contains("___") && !comp.contains("._");
        if !(first_last_ok && chars_ok && seps_ok) {
            return Err(format!("invalid repository path component {comp:?}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(s: &str) -> String {
        Reference::parse(s).expect(s).to_string()
    }

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn normalizes_like_docker() {
        assert_eq!(norm("busybox"), "docker.io/library/busybox:latest");
        assert_eq!(norm("busybox:1.36"), "docker.io/library/busybox:1.36");
        assert_eq!(norm("user/app"), "docker.io/user/app:latest");
        assert_eq!(
            norm("index.docker.io/library/x"),
            "docker.io/library/x:latest"
        );
        assert_eq!(norm("docker.io/x"), "docker.io/library/x:latest");
        assert_eq!(
            norm("registry.k8s.io/pause:3.10"),
            "registry.k8s.io/pause:3.10"
        );
        assert_eq!(norm("localhost/app"), "localhost/app:latest");
        assert_eq!(norm("127.0.0.1:5000/a/b:v1"), "127.0.0.1:5000/a/b:v1");
        assert_eq!(norm("localhost:5000/app"), "localhost:5000/app:latest");
    }

    #[test]
    fn digests_and_tag_digest() {
        let r = Reference::parse(&format!("busybox@{D}")).expect("digest");
        assert_eq!(r.tag, None);
        assert_eq!(r.digest.as_deref(), Some(D));
        assert_eq!(r.object(), D);
        let r = Reference::parse(&format!("127.0.0.1:5000/x:v1@{D}")).expect("both");
        assert_eq!(r.tag.as_deref(), Some("v1"));
        assert_eq!(r.object(), D);
        assert_eq!(r.tagged().as_deref(), Some("127.0.0.1:5000/x:v1"));
        assert_eq!(r.with_digest(D), format!("127.0.0.1:5000/x@{D}"));
    }

    #[test]
    fn rejects_bad_references() {
        for bad in [
            "",
            "Busybox",
            "busybox:",
            "busybox:-x",
            "busybox@sha256:abc",
            "busybox@md5:0123",
            "a//b",
            "a/b_",
            "host:99999/x",
            "bad ref",
        ] {
            assert!(Reference::parse(bad).is_err(), "{bad:?} should be rejected");
        }
    }
}
