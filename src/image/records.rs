//! Image records: what the ImageService lists.
//!
//! One JSON file per image at `<root>/images/<config-digest hex>.json`,
//! written atomically and only after every layer of the image is unpacked
//! and committed, so an image is never listed half-pulled. The image ID is
//! the config digest (as containerd and the kubelet expect). A reference
//! (`repo:tag` or `repo@digest`) belongs to at most one image; tagging a new
//! image moves the tag.

use super::error::ImageError;
use crate::store::atomic;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

/// The record format version this build writes and reads.
pub const RECORD_VERSION: u32 = 1;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ImageRecord {
    pub version: u32,
    /// The config digest.
    pub id: String,
    pub repo_tags: Vec<String>,
    pub repo_digests: Vec<String>,
    /// The image manifest's digest.
    pub manifest_digest: String,
    /// The index (manifest list) digest the manifest was chosen from, if any.
    #[serde(default)]
    pub index_digest: Option<String>,
    /// Compressed layer digests, bottom first.
    pub layers: Vec<String>,
    /// Blobs of the manifest that are not filesystem layers (kept, not
    /// unpacked: a WebAssembly module its runtime reads from the store).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<String>,
    pub chain_ids: Vec<String>,
    /// Manifest + config + compressed layers, in bytes.
    pub size: u64,
    /// The config's `User` (uid, name, or `uid:gid`).
    pub user: String,
    pub pinned: bool,
    /// When it was first stored, in ns since the epoch.
    pub created_ns: i64,
}

impl ImageRecord {
    /// Every blob the record keeps alive.
    pub fn blobs(&self) -> impl Iterator<Item = &str> {
        self.layers
            .iter()
            .chain(&self.artifacts)
            .map(String::as_str)
            .chain([self.manifest_digest.as_str(), self.id.as_str()])
            .chain(self.index_digest.as_deref())
    }

    pub fn refs(&self) -> impl Iterator<Item = &str> {
        self.repo_tags
            .iter()
            .chain(self.repo_digests.iter())
            .map(String::as_str)
    }
}

/// The in-memory index of records, mirrored on disk.
#[derive(Debug)]
pub struct Records {
    dir: PathBuf,
    by_id: HashMap<String, ImageRecord>,
}

fn file_name(id: &str) -> String {
    format!("{}.json", id.split_once(':').map(|(_, h)| h).unwrap_or(id))
}

impl Records {
    pub fn load(root: &Path) -> Result<Records, ImageError> {
        let dir = root.join("images");
        fs::create_dir_all(&dir)
            .map_err(|e| ImageError::io(format!("create {}", dir.display()), e))?;
        atomic::remove_stale_temps(&dir).map_err(|e| ImageError::io("clean image temps", e))?;
        let mut by_id = HashMap::new();
        for ent in fs::read_dir(&dir).map_err(|e| ImageError::io("list images", e))? {
            let path = ent.map_err(|e| ImageError::io("list images", e))?.path();
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            let rec: ImageRecord = match atomic::read_json(&path) {
                Ok(Some(r)) => r,
                Ok(None) => continue,
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "ignoring unreadable image record");
                    continue;
                }
            };
            if rec.version > RECORD_VERSION {
                return Err(ImageError::Internal(format!(
                    "{}: record version {} is newer than this husk understands ({RECORD_VERSION})",
                    path.display(),
                    rec.version
                )));
            }
            by_id.insert(rec.id.clone(), rec);
        }
        Ok(Records { dir, by_id })
    }

    pub fn all(&self) -> impl Iterator<Item = &ImageRecord> {
        self.by_id.values()
    }

    pub fn get(&self, id: &str) -> Option<&ImageRecord> {
        self.by_id.get(id)
    }

    /// The image holding reference `r` (a full `repo:tag` or `repo@digest`).
    pub fn by_ref(&self, r: &str) -> Option<&ImageRecord> {
        self.by_id.values().find(|rec| rec.refs().any(|x| x == r))
    }

    /// Stores `rec`, merging refs into an existing record with the same id
    /// and taking its refs away from any other image. Returns the ids of
    /// images whose records changed (for callers that garbage-collect).
    pub fn put(&mut self, mut rec: ImageRecord) -> Result<ImageRecord, ImageError> {
        if let Some(old) = self.by_id.get(&rec.id) {
            for t in &old.repo_tags {
                if !rec.repo_tags.contains(t) {
                    rec.repo_tags.push(t.clone());
                }
            }
            for d in &old.repo_digests {
                if !rec.repo_digests.contains(d) {
                    rec.repo_digests.push(d.clone());
                }
            }
            rec.created_ns = old.created_ns;
            rec.pinned |= old.pinned;
        }
        rec.repo_tags.sort();
        rec.repo_digests.sort();
        // A tag names one image: take it away from others.
        let others: Vec<String> = self
            .by_id
            .values()
            .filter(|o| o.id != rec.id && o.repo_tags.iter().any(|t| rec.repo_tags.contains(t)))
            .map(|o| o.id.clone())
            .collect();
        for id in others {
            if let Some(mut o) = self.by_id.get(&id).cloned() {
                o.repo_tags.retain(|t| !rec.repo_tags.contains(t));
                self.write(o)?;
            }
        }
        self.write(rec.clone())?;
        Ok(rec)
    }

    /// Writes `rec` as is.
    pub fn write(&mut self, rec: ImageRecord) -> Result<(), ImageError> {
        atomic::write_json(&self.dir.join(file_name(&rec.id)), &rec)
            .map_err(|e| ImageError::io(format!("write image record {}", rec.id), e))?;
        self.by_id.insert(rec.id.clone(), rec);
        Ok(())
    }

    /// Deletes the record of `id`.
    pub fn delete(&mut self, id: &str) -> Result<Option<ImageRecord>, ImageError> {
        match fs::remove_file(self.dir.join(file_name(id))) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(ImageError::io(format!("remove image record {id}"), e))
            }
            _ => {}
        }
        Ok(self.by_id.remove(id))
    }
}
