//! OCI and Docker v2 schema 2 manifests, indexes and image configs, and the
//! choice of a platform from an index or manifest list.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
pub const DOCKER_SCHEMA1: &str = "application/vnd.docker.distribution.manifest.v1+json";
pub const DOCKER_SCHEMA1_SIGNED: &str = "application/vnd.docker.distribution.manifest.v1+prettyjws";
pub const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
pub const DOCKER_CONFIG: &str = "application/vnd.docker.container.image.v1+json";
pub const DOCKER_LAYER_GZIP: &str = "application/vnd.docker.image.rootfs.diff.tar.gzip";

/// Whether a manifest's layer is a filesystem layer to unpack (OCI's and
/// Docker's tar layers, as containerd's `IsLayerType`; a descriptor with
/// no media type is taken as one). Anything else is a blob to keep.
pub fn is_layer(media_type: &str) -> bool {
    media_type.is_empty()
        || media_type.starts_with("application/vnd.oci.image.layer.")
        || media_type.starts_with("application/vnd.docker.image.rootfs.")
}

/// The Accept header for manifest requests, in preference order.
pub const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Platform {
    pub architecture: String,
    pub os: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    #[serde(default)]
    pub media_type: String,
    pub digest: String,
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<Platform>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub urls: Option<Vec<String>>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub schema_version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    pub config: Descriptor,
    pub layers: Vec<Descriptor>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Index {
    pub schema_version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    pub manifests: Vec<Descriptor>,
}

/// The parts of an image config husk uses; the raw JSON is kept too.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ImageConfig {
    #[serde(default)]
    pub architecture: String,
    #[serde(default)]
    pub os: String,
    #[serde(default)]
    pub config: Option<ContainerDefaults>,
    pub rootfs: RootFs,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RootFs {
    #[serde(rename = "type", default)]
    pub kind: String,
    #[serde(default)]
    pub diff_ids: Vec<String>,
}

/// The image's defaults for containers (Docker's `config` object).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ContainerDefaults {
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default)]
    pub env: Option<Vec<String>>,
    #[serde(default)]
    pub entrypoint: Option<Vec<String>>,
    #[serde(default)]
    pub cmd: Option<Vec<String>>,
    #[serde(default)]
    pub working_dir: Option<String>,
    #[serde(default)]
    pub labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub stop_signal: Option<String>,
    #[serde(default)]
    pub volumes: Option<BTreeMap<String, serde_json::Value>>,
}

/// A manifest document of any supported kind.
#[derive(Debug, Clone)]
pub enum Document {
    Manifest(Manifest),
    Index(Index),
}

/// Why a document was refused.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DocumentError {
    #[error(
        "unsupported manifest media type {0:?} (Docker schema 1 is deprecated and not supported)"
    )]
    Unsupported(String),
    #[error("malformed manifest: {0}")]
    Malformed(String),
}

impl Document {
    /// Parses a manifest body; `content_type` is the registry's header.
    pub fn parse(body: &[u8], content_type: Option<&str>) -> Result<Document, DocumentError> {
        let v: serde_json::Value =
            serde_json::from_slice(body).map_err(|e| DocumentError::Malformed(e.to_string()))?;
        let declared = v
            .get("mediaType")
            .and_then(|m| m.as_str())
            .map(str::to_string)
            .or_else(|| content_type.map(|c| c.split(';').next().unwrap_or("").trim().to_string()))
            .unwrap_or_default();
        if v.get("schemaVersion").and_then(|s| s.as_u64()) == Some(1)
            || declared == DOCKER_SCHEMA1
            || declared == DOCKER_SCHEMA1_SIGNED
        {
            return Err(DocumentError::Unsupported(declared));
        }
        let is_index =
            v.get("manifests").is_some() || declared == OCI_INDEX || declared == DOCKER_LIST;
        if is_index {
            serde_json::from_value(v)
                .map(Document::Index)
                .map_err(|e| DocumentError::Malformed(e.to_string()))
        } else if v.get("layers").is_some() && v.get("config").is_some() {
            serde_json::from_value(v)
                .map(Document::Manifest)
                .map_err(|e| DocumentError::Malformed(e.to_string()))
        } else {
            Err(DocumentError::Unsupported(declared))
        }
    }
}

/// The platform of this node in OCI terms.
pub fn host_platform() -> Platform {
    let architecture = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    }
    .to_string();
    let variant = match architecture.as_str() {
        "arm64" => Some("v8".to_string()),
        _ => None,
    };
    Platform {
        architecture,
        os: "linux".to_string(),
        variant,
    }
}

/// Picks the manifest for `want` from an index, as containerd's platform
/// matcher does: same os and architecture, and the variant when both name
/// one (arm64's `v8` is the default variant).
pub fn select_platform<'a>(index: &'a Index, want: &Platform) -> Option<&'a Descriptor> {
    let norm = |p: &Platform| -> Option<String> {
        match (p.architecture.as_str(), p.variant.as_deref()) {
            ("arm64", None) => Some("v8".into()),
            (_, v) => v.map(str::to_string),
        }
    };
    let candidates = index.manifests.iter().filter(|d| {
        d.media_type != OCI_INDEX
            && d.media_type != DOCKER_LIST
            && d.platform
                .as_ref()
                .map(|p| p.os == want.os && p.architecture == want.architecture)
                .unwrap_or(false)
    });
    let mut fallback = None;
    for d in candidates {
        let Some(p) = &d.platform else { continue };
        if norm(p) == norm(want) {
            return Some(d);
        }
        if fallback.is_none() && (p.variant.is_none() || want.variant.is_none()) {
            fallback = Some(d);
        }
    }
    fallback
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(arch: &str, variant: Option<&str>) -> Descriptor {
        Descriptor {
            media_type: OCI_MANIFEST.into(),
            digest: format!("sha256:{}", "a".repeat(64)),
            size: 1,
            platform: Some(Platform {
                architecture: arch.into(),
                os: "linux".into(),
                variant: variant.map(Into::into),
            }),
            annotations: None,
            urls: None,
        }
    }

    #[test]
    fn selects_matching_platform() {
        let idx = Index {
            schema_version: 2,
            media_type: Some(OCI_INDEX.into()),
            manifests: vec![
                desc("arm", Some("v7")),
                desc("amd64", None),
                desc("arm64", Some("v8")),
            ],
        };
        let amd = Platform {
            architecture: "amd64".into(),
            os: "linux".into(),
            variant: None,
        };
        assert_eq!(select_platform(&idx, &amd), Some(&idx.manifests[1]));
        let arm64 = Platform {
            architecture: "arm64".into(),
            os: "linux".into(),
            variant: None,
        };
        assert_eq!(select_platform(&idx, &arm64), Some(&idx.manifests[2]));
        let s390 = Platform {
            architecture: "s390x".into(),
            os: "linux".into(),
            variant: None,
        };
        assert_eq!(select_platform(&idx, &s390), None);
    }

    #[test]
    fn refuses_schema1_and_garbage() {
        assert!(matches!(
            Document::parse(br#"{"schemaVersion":1,"name":"x"}"#, None),
            Err(DocumentError::Unsupported(_))
        ));
        assert!(matches!(
            Document::parse(b"not json", None),
            Err(DocumentError::Malformed(_))
        ));
    }

    #[test]
    fn parses_docker_list_by_header() {
        let body = br#"{"schemaVersion":2,"manifests":[]}"#;
        assert!(matches!(
            Document::parse(body, Some(DOCKER_LIST)),
            Ok(Document::Index(_))
        ));
    }
}
