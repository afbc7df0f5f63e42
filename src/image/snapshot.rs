//! Layer snapshots: each layer unpacked once into a directory usable as an
//! overlayfs lowerdir, keyed by chain ID and shared between images.
//!
//! On disk under `<root>/snapshots`:
//! - `<id>/fs`: the layer's contents in overlayfs form (whiteouts are 0/0
//!   character devices, opaque dirs carry `trusted.overlay.opaque=y`). Ids
//!   are small numbers so that long lowerdir lists fit in one mount option.
//! - `chains/<chain-id hex>`: the id that holds that chain, written
//!   atomically; this file is the commit point. An `<id>` dir no chain file
//!   names is an unfinished apply and is removed when the store opens.
//! - `<id>/merged`, `<id>/work`: exist only while a layer is being applied
//!   onto a temporary overlay of its parents.
//! - `empty`: the lowerdir of an image with no filesystem layer (a
//!   WebAssembly image whose module is a blob).

use super::error::ImageError;
use super::unpack::{self, Applied};
use crate::store::atomic;
use std::collections::HashMap;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Chain IDs from diff IDs, per the OCI image spec.
pub fn chain_ids(diff_ids: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(diff_ids.len());
    for d in diff_ids {
        let next = match out.last() {
            None => d.clone(),
            Some(prev) => super::content::sha256_digest(format!("{prev} {d}").as_bytes()),
        };
        out.push(next);
    }
    out
}

fn chain_file_name(chain_id: &str) -> String {
    chain_id.replace(':', "-")
}

/// The snapshot store.
#[derive(Debug)]
pub struct Snapshots {
    dir: PathBuf,
    next: AtomicU64,
}

/// A snapshot being prepared; becomes visible only through `commit`.
#[derive(Debug)]
pub struct Prepared {
    pub id: u64,
    pub dir: PathBuf,
    pub applied: Applied,
}

impl Snapshots {
    /// Opens the store, unmounting leftover apply mounts and removing
    /// snapshots that were never committed.
    pub fn open(root: &Path) -> Result<Snapshots, ImageError> {
        let dir = root.join("snapshots");
        let chains = dir.join("chains");
        fs::create_dir_all(&chains)
            .map_err(|e| ImageError::io(format!("create {}", chains.display()), e))?;
        for m in crate::sys::mounts_under(&dir) {
            let _ = rustix::mount::unmount(&m, rustix::mount::UnmountFlags::DETACH);
        }
        atomic::remove_stale_temps(&chains)
            .map_err(|e| ImageError::io("clean snapshot temps", e))?;
        let s = Snapshots {
            dir,
            next: AtomicU64::new(1),
        };
        let committed: HashMap<u64, String> =
            s.list()?.into_iter().map(|(c, id)| (id, c)).collect();
        let mut max = 0;
        for ent in fs::read_dir(&s.dir).map_err(|e| ImageError::io("list snapshots", e))? {
            let ent = ent.map_err(|e| ImageError::io("list snapshots", e))?;
            let Ok(id) = ent.file_name().to_string_lossy().parse::<u64>() else {
                continue;
            };
            max = max.max(id);
            if !committed.contains_key(&id) {
                tracing::info!(snapshot = id, "removing unfinished snapshot");
                fs::remove_dir_all(ent.path())
                    .map_err(|e| ImageError::io("remove unfinished snapshot", e))?;
            } else {
                let _ = fs::remove_dir_all(ent.path().join("merged"));
                let _ = fs::remove_dir_all(ent.path().join("work"));
            }
        }
        s.next.store(max + 1, Ordering::SeqCst);
        Ok(s)
    }

    /// An empty, read-only-by-convention dir: the one lowerdir of an
    /// image without filesystem layers (overlayfs needs one).
    pub fn empty(&self) -> Result<PathBuf, ImageError> {
        let p = self.dir.join("empty");
        match fs::create_dir(&p) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(ImageError::io(format!("create {}", p.display()), e)),
        }
        Ok(p)
    }

    fn id_dir(&self, id: u64) -> PathBuf {
        self.dir.join(id.to_string())
    }

    /// The committed `fs` dir for a chain ID.
    pub fn get(&self, chain_id: &str) -> Option<PathBuf> {
        let f = self.dir.join("chains").join(chain_file_name(chain_id));
        let id: u64 = fs::read_to_string(f).ok()?.trim().parse().ok()?;
        let p = self.id_dir(id).join("fs");
        p.is_dir().then_some(p)
    }

    /// Every committed (chain ID, id).
    pub fn list(&self) -> Result<Vec<(String, u64)>, ImageError> {
        let mut out = Vec::new();
        let chains = self.dir.join("chains");
        for ent in fs::read_dir(&chains).map_err(|e| ImageError::io("list chains", e))? {
            let ent = ent.map_err(|e| ImageError::io("list chains", e))?;
            let name = ent.file_name().to_string_lossy().to_string();
            if name.starts_with('.') {
                continue;
            }
            if let Some(id) = fs::read_to_string(ent.path())
                .ok()
                .and_then(|s| s.trim().parse().ok())
            {
                out.push((name.replacen('-', ":", 1), id));
            }
        }
        Ok(out)
    }

    /// Applies a layer onto a view of `parents` (bottom first) into a new,
    /// uncommitted snapshot.
    pub fn apply<R: Read + Send>(
        &self,
        parents: &[PathBuf],
        layer: R,
    ) -> Result<Prepared, ImageError> {
        let id = self.next.fetch_add(1, Ordering::SeqCst);
        let dir = self.id_dir(id);
        let fs_dir = dir.join("fs");
        let result = (|| {
            fs::create_dir_all(&fs_dir)
                .map_err(|e| ImageError::io(format!("create {}", fs_dir.display()), e))?;
            if parents.is_empty() {
                return unpack::apply_layer(&fs_dir, layer, false);
            }
            let merged = dir.join("merged");
            let work = dir.join("work");
            fs::create_dir_all(&merged).map_err(|e| ImageError::io("create merged dir", e))?;
            fs::create_dir_all(&work).map_err(|e| ImageError::io("create work dir", e))?;
            let lower: Vec<String> = parents
                .iter()
                .rev()
                .map(|p| p.display().to_string())
                .collect();
            let opts = format!(
                "lowerdir={},upperdir={},workdir={},index=off",
                lower.join(":"),
                fs_dir.display(),
                work.display()
            );
            crate::sys::mount_overlay(&merged, &opts).map_err(|e| {
                ImageError::io(
                    format!("mount overlay for apply at {}", merged.display()),
                    e,
                )
            })?;
            let applied = unpack::apply_layer(&merged, layer, true);
            let unmounted = rustix::mount::unmount(&merged, rustix::mount::UnmountFlags::empty())
                .or_else(|_| rustix::mount::unmount(&merged, rustix::mount::UnmountFlags::DETACH));
            let applied = applied?;
            unmounted.map_err(|e| ImageError::io("unmount apply overlay", e.into()))?;
            for rel in &applied.opaque_dirs {
                let upper = fs_dir.join(rel);
                fs::create_dir_all(&upper).map_err(|e| ImageError::io("create opaque dir", e))?;
                rustix::fs::setxattr(
                    &upper,
                    "trusted.overlay.opaque",
                    b"y",
                    rustix::fs::XattrFlags::empty(),
                )
                .map_err(|e| {
                    ImageError::io(format!("mark {} opaque", upper.display()), e.into())
                })?;
            }
            fs::remove_dir(&merged).map_err(|e| ImageError::io("remove merged dir", e))?;
            fs::remove_dir_all(&work).map_err(|e| ImageError::io("remove work dir", e))?;
            Ok(applied)
        })();
        match result {
            Ok(applied) => Ok(Prepared { id, dir, applied }),
            Err(e) => {
                let _ = fs::remove_dir_all(&dir);
                Err(e)
            }
        }
    }

    /// Makes a prepared snapshot the one for `chain_id`.
    pub fn commit(&self, p: Prepared, chain_id: &str) -> Result<PathBuf, ImageError> {
        let f = self.dir.join("chains").join(chain_file_name(chain_id));
        atomic::write_file(&f, p.id.to_string().as_bytes())
            .map_err(|e| ImageError::io(format!("commit snapshot {chain_id}"), e))?;
        Ok(p.dir.join("fs"))
    }

    /// Drops an uncommitted snapshot.
    pub fn discard(&self, p: Prepared) {
        let _ = fs::remove_dir_all(&p.dir);
    }

    /// Removes a committed snapshot (chain file first, so a crash in between
    /// leaves an unreferenced dir that the next open removes).
    pub fn remove(&self, chain_id: &str) -> Result<(), ImageError> {
        let f = self.dir.join("chains").join(chain_file_name(chain_id));
        let id: Option<u64> = fs::read_to_string(&f)
            .ok()
            .and_then(|s| s.trim().parse().ok());
        match fs::remove_file(&f) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(ImageError::io(format!("remove snapshot {chain_id}"), e))
            }
            _ => {}
        }
        if let Some(id) = id {
            fs::remove_dir_all(self.id_dir(id))
                .or_else(|e| {
                    if e.kind() == std::io::ErrorKind::NotFound {
                        Ok(())
                    } else {
                        Err(e)
                    }
                })
                .map_err(|e| ImageError::io(format!("remove snapshot dir {id}"), e))?;
        }
        Ok(())
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_ids_follow_the_spec() {
        let a = format!("sha256:{}", "a".repeat(64));
        let b = format!("sha256:{}", "b".repeat(64));
        let c = chain_ids(&[a.clone(), b.clone()]);
        assert_eq!(c[0], a);
        assert_eq!(
            c[1],
            super::super::content::sha256_digest(format!("{a} {b}").as_bytes())
        );
    }
}
