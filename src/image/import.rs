//! `husk images import`: loads an OCI image-layout tar or a docker-archive
//! tar (as `docker save` writes) into the store, for air-gapped nodes.
//!
//! The archive is first extracted (regular files only, names confined) into
//! a scratch dir under the ingest area; blobs are copied into the content
//! store with their digests verified, then layers are unpacked and recorded
//! exactly as a pull does.

use super::error::ImageError;
use super::manager::{ImageManager, Progress};
use super::manifest::{self, Descriptor, Document, ImageConfig, Manifest};
use super::pull::Prepared;
use super::records::ImageRecord;
use crate::reference::{validate_digest, Reference};
use serde::Deserialize;

use std::fs;
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

/// docker-archive's manifest.json entry.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DockerArchiveEntry {
    config: String,
    #[serde(default)]
    repo_tags: Option<Vec<String>>,
    layers: Vec<String>,
}

struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn confined(base: &Path, name: &Path) -> Option<PathBuf> {
    let mut out = base.to_path_buf();
    let mut any = false;
    for c in name.components() {
        match c {
            Component::Normal(n) => {
                out.push(n);
                any = true;
            }
            Component::CurDir => {}
            _ => return None,
        }
    }
    any.then_some(out)
}

fn extract(archive: &Path, into: &Path) -> Result<(), ImageError> {
    let f = fs::File::open(archive)
        .map_err(|e| ImageError::io(format!("open {}", archive.display()), e))?;
    let mut tar = tar::Archive::new(
        super::unpack::decompress(f).map_err(|e| ImageError::io("read archive", e))?,
    );
    for entry in tar.entries().map_err(|e| {
        ImageError::Invalid(format!("{}: not a tar archive: {e}", archive.display()))
    })? {
        let mut entry = entry
            .map_err(|e| ImageError::Invalid(format!("{}: corrupt tar: {e}", archive.display())))?;
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let name = entry
            .path()
            .map_err(|e| ImageError::Invalid(format!("bad name: {e}")))?
            .into_owned();
        let Some(dest) = confined(into, &name) else {
            return Err(ImageError::Invalid(format!(
                "archive entry {:?} escapes the archive",
                name.display().to_string()
            )));
        };
        if let Some(parent) = dest.parent() {
            fs::create_dir_all(parent).map_err(|e| ImageError::io("create scratch dir", e))?;
        }
        let mut out =
            fs::File::create(&dest).map_err(|e| ImageError::io("write scratch file", e))?;
        io::copy(&mut entry, &mut out).map_err(|e| ImageError::io("write scratch file", e))?;
    }
    Ok(())
}

fn read_json<T: for<'de> Deserialize<'de>>(p: &Path) -> Result<T, ImageError> {
    let data = fs::read(p)
        .map_err(|e| ImageError::Invalid(format!("archive lacks {}: {e}", p.display())))?;
    serde_json::from_slice(&data).map_err(|e| ImageError::Invalid(format!("{}: {e}", p.display())))
}

fn hash_file(p: &Path) -> Result<(String, u64), ImageError> {
    let mut f = fs::File::open(p)
        .map_err(|e| ImageError::Invalid(format!("archive lacks {}: {e}", p.display())))?;
    let mut h = super::content::Hasher::sha256();
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0u64;
    loop {
        let k = f
            .read(&mut buf)
            .map_err(|e| ImageError::io("read archive blob", e))?;
        if k == 0 {
            break;
        }
        h.update(&buf[..k]);
        n += k as u64;
    }
    Ok((h.finish(), n))
}

impl ImageManager {
    fn put_file(&self, digest: &str, size: u64, p: &Path) -> Result<(), ImageError> {
        if self.content.has(digest) {
            return Ok(());
        }
        let mut f = fs::File::open(p)
            .map_err(|e| ImageError::Invalid(format!("archive lacks blob {digest}: {e}")))?;
        let mut w = self.content.writer(digest, Some(size))?;
        io::copy(&mut f, &mut w).map_err(|e| ImageError::io(format!("import blob {digest}"), e))?;
        w.commit()
    }

    /// Imports every image in the archive at `path`; `tag` names an image
    /// the archive leaves unnamed.
    pub async fn import(
        self: &Arc<Self>,
        path: &Path,
        tag: Option<&str>,
    ) -> Result<Vec<ImageRecord>, ImageError> {
        if !path.is_absolute() {
            return Err(ImageError::Invalid(format!(
                "archive path {:?} must be absolute",
                path.display().to_string()
            )));
        }
        let tag = tag
            .filter(|t| !t.is_empty())
            .map(Reference::parse)
            .transpose()?;
        let scratch = Scratch(
            self.content
                .ingest_dir()
                .join(format!("import-{:016x}", rand::random::<u64>())),
        );
        fs::create_dir_all(&scratch.0).map_err(|e| ImageError::io("create scratch dir", e))?;
        let (archive, dir) = (path.to_path_buf(), scratch.0.clone());
        tokio::task::spawn_blocking(move || extract(&archive, &dir))
            .await
            .map_err(|e| ImageError::Internal(format!("extract task: {e}")))??;

        let mut prepared = Vec::new();
        let this = self.clone();
        let dir = scratch.0.clone();
        let tag2 = tag.clone();
        let items = tokio::task::spawn_blocking(move || {
            if dir.join("index.json").is_file() {
                this.prepare_oci(&dir, tag2.as_ref())
            } else if dir.join("manifest.json").is_file() {
                this.prepare_docker(&dir, tag2.as_ref())
            } else {
                Err(ImageError::Invalid(
                    "archive is neither an OCI image layout (index.json) nor a docker archive (manifest.json)".into(),
                ))
            }
        })
        .await
        .map_err(|e| ImageError::Internal(format!("import task: {e}")))??;
        prepared.extend(items);
        let mut out = Vec::new();
        for p in prepared {
            let progress = Arc::new(Progress::default());
            let rec = self.install(p, None, &progress).await?;
            tracing::info!(image_id = %rec.id, tags = ?rec.repo_tags, "imported image");
            out.push(rec);
        }
        Ok(out)
    }

    fn prepare_oci(
        &self,
        dir: &Path,
        tag: Option<&Reference>,
    ) -> Result<Vec<Prepared>, ImageError> {
        let blob = |d: &str| -> Result<PathBuf, ImageError> {
            validate_digest(d).map_err(ImageError::Invalid)?;
            let (alg, hex) = d.split_once(':').unwrap_or(("sha256", d));
            Ok(dir.join("blobs").join(alg).join(hex))
        };
        let index: manifest::Index = read_json(&dir.join("index.json"))?;
        let mut out = Vec::new();
        for top in &index.manifests {
            let annotations = top.annotations.clone().unwrap_or_default();
            let name = annotations
                .get("io.containerd.image.name")
                .cloned()
                .or_else(|| {
                    annotations
                        .get("org.opencontainers.image.ref.name")
                        .cloned()
                });
            let reference = match (name, tag) {
                (Some(n), _) if n.contains('/') || n.contains(':') => Some(Reference::parse(&n)?),
                (Some(t), Some(base)) => Some(Reference::parse(&format!("{}:{t}", base.name()))?),
                (_, Some(t)) => Some(t.clone()),
                (Some(t), None) => {
                    return Err(ImageError::Invalid(format!(
                        "the archive names an image only by tag {t:?}; give --tag REPO to import it"
                    )))
                }
                (None, None) => None,
            };
            let body = fs::read(blob(&top.digest)?)
                .map_err(|e| ImageError::Invalid(format!("archive lacks {}: {e}", top.digest)))?;
            let mut h = super::content::Hasher::for_digest(&top.digest)?;
            h.update(&body);
            if h.finish() != top.digest {
                return Err(ImageError::DigestMismatch {
                    expected: top.digest.clone(),
                    actual: "archive content".into(),
                });
            }
            self.content.put(&top.digest, &body)?;
            let (mdesc, mbody, index_digest) = match Document::parse(&body, Some(&top.media_type))?
            {
                Document::Index(idx) => {
                    let d = manifest::select_platform(&idx, &manifest::host_platform())
                        .ok_or_else(|| {
                            ImageError::NotFound(
                                "no manifest for this platform in the archive".into(),
                            )
                        })?
                        .clone();
                    let b = fs::read(blob(&d.digest)?).map_err(|e| {
                        ImageError::Invalid(format!("archive lacks {}: {e}", d.digest))
                    })?;
                    self.content.put(&d.digest, &b)?;
                    (d, b, Some(top.digest.clone()))
                }
                Document::Manifest(_) => (top.clone(), body, None),
            };
            let Document::Manifest(m) = Document::parse(&mbody, Some(&mdesc.media_type))? else {
                return Err(ImageError::Invalid("nested index in archive".into()));
            };
            self.put_file(&m.config.digest, m.config.size, &blob(&m.config.digest)?)?;
            for l in &m.layers {
                self.put_file(&l.digest, l.size, &blob(&l.digest)?)?;
            }
            let config: ImageConfig = serde_json::from_slice(&self.content.read(&m.config.digest)?)
                .map_err(|e| ImageError::Invalid(format!("bad image config: {e}")))?;
            out.push(Prepared {
                names: reference
                    .as_ref()
                    .and_then(Reference::tagged)
                    .into_iter()
                    .collect(),
                digests: reference
                    .iter()
                    .map(|r| r.with_digest(&top.digest))
                    .collect(),
                manifest_digest: mdesc.digest.clone(),
                manifest_size: mbody.len() as u64,
                manifest: m,
                index_digest,
                config,
            });
        }
        Ok(out)
    }

    fn prepare_docker(
        &self,
        dir: &Path,
        tag: Option<&Reference>,
    ) -> Result<Vec<Prepared>, ImageError> {
        let entries: Vec<DockerArchiveEntry> = read_json(&dir.join("manifest.json"))?;
        let file = |n: &str| {
            confined(dir, Path::new(n)).ok_or_else(|| {
                ImageError::Invalid(format!("manifest.json names {n:?} outside the archive"))
            })
        };
        let mut out = Vec::new();
        for e in entries {
            let cpath = file(&e.config)?;
            let (cdigest, csize) = hash_file(&cpath)?;
            self.put_file(&cdigest, csize, &cpath)?;
            let mut layers = Vec::new();
            for l in &e.layers {
                let p = file(l)?;
                let (digest, size) = hash_file(&p)?;
                let mut head = [0u8; 2];
                let gz = fs::File::open(&p)
                    .and_then(|mut f| f.read_exact(&mut head))
                    .is_ok()
                    && head == [0x1f, 0x8b];
                self.put_file(&digest, size, &p)?;
                layers.push(Descriptor {
                    media_type: if gz {
                        manifest::DOCKER_LAYER_GZIP.into()
                    } else {
                        "application/vnd.docker.image.rootfs.diff.tar".into()
                    },
                    digest,
                    size,
                    platform: None,
                    annotations: None,
                    urls: None,
                });
            }
            let m = Manifest {
                schema_version: 2,
                media_type: Some(manifest::DOCKER_MANIFEST.into()),
                config: Descriptor {
                    media_type: manifest::DOCKER_CONFIG.into(),
                    digest: cdigest.clone(),
                    size: csize,
                    platform: None,
                    annotations: None,
                    urls: None,
                },
                layers,
            };
            let mbody = serde_json::to_vec(&m).map_err(|e| ImageError::Internal(e.to_string()))?;
            let mdigest = super::content::sha256_digest(&mbody);
            self.content.put(&mdigest, &mbody)?;
            let mut names: Vec<String> = Vec::new();
            for t in e.repo_tags.unwrap_or_default() {
                names.extend(Reference::parse(&t)?.tagged());
            }
            if let Some(t) = tag {
                names.extend(t.tagged());
            }
            let config: ImageConfig = serde_json::from_slice(&self.content.read(&cdigest)?)
                .map_err(|e| ImageError::Invalid(format!("bad image config: {e}")))?;
            out.push(Prepared {
                names,
                digests: Vec::new(),
                manifest_digest: mdigest,
                manifest_size: mbody.len() as u64,
                manifest: m,
                index_digest: None,
                config,
            });
        }
        Ok(out)
    }
}
