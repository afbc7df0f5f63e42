//! `ImageManager`: the image store's state and the operations that are not
//! a pull (lookup, list, remove, garbage collection, filesystem usage).
//!
//! Locking: `records` is a short-held std lock, never held across an await
//! or a registry call. Pulls take per-blob and per-chain async locks (so one
//! download or unpack serves every concurrent pull) and lease the digests and
//! chain IDs they use; garbage collection skips leased objects and decides
//! and unlinks under the lease lock, so a pull never loses content it is
//! about to use.

use super::content::ContentStore;
use super::error::ImageError;
use super::records::{ImageRecord, Records};
use super::registry::RegistryClient;
use super::snapshot::Snapshots;
use crate::reference::Reference;
use crate::sys::now_ns;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

/// What the image store needs from the config.
#[derive(Debug, Clone)]
pub struct ImageStoreConfig {
    pub root: PathBuf,
    pub registry_config_dir: PathBuf,
    pub max_concurrent_downloads: usize,
    pub stall_timeout: Duration,
}

/// Async locks by key, dropped when nobody holds or waits on them.
#[derive(Default)]
pub struct KeyedLocks {
    map: Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>,
}

impl KeyedLocks {
    pub async fn lock(&self, key: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let m = {
            let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
            if map.len() > 1024 {
                map.retain(|_, w| w.strong_count() > 0);
            }
            match map.get(key).and_then(Weak::upgrade) {
                Some(m) => m,
                None => {
                    let m = Arc::new(tokio::sync::Mutex::new(()));
                    map.insert(key.to_string(), Arc::downgrade(&m));
                    m
                }
            }
        };
        m.lock_owned().await
    }
}

/// Progress of one pull, readable by the admin API.
#[derive(Debug, Default)]
pub struct Progress {
    pub reference: String,
    pub bytes_done: AtomicU64,
    pub bytes_total: AtomicU64,
    pub layers_done: AtomicU64,
    pub layers_total: AtomicU64,
}

/// Digests and chain IDs in use by running pulls; GC leaves them alone.
pub struct Lease<'a> {
    owner: &'a ImageManager,
    keys: Vec<String>,
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        let mut leases = self.owner.leases.lock().unwrap_or_else(|p| p.into_inner());
        for k in &self.keys {
            if let Some(n) = leases.get_mut(k) {
                *n -= 1;
                if *n == 0 {
                    leases.remove(k);
                }
            }
        }
    }
}

/// The lease key that holds off garbage collection entirely.
pub(super) const ALL: &str = "*";

/// Filesystem usage of the image store, cached briefly.
#[derive(Debug, Clone, Copy)]
pub struct FsUsage {
    pub timestamp_ns: i64,
    pub bytes: u64,
    pub inodes: u64,
}

pub struct ImageManager {
    pub(super) cfg: ImageStoreConfig,
    pub(super) content: ContentStore,
    pub(super) snapshots: Arc<Snapshots>,
    pub(super) records: RwLock<Records>,
    pub(super) registry: RegistryClient,
    pub(super) blob_locks: KeyedLocks,
    pub(super) chain_locks: KeyedLocks,
    leases: Mutex<HashMap<String, usize>>,
    pub(super) progress: Mutex<HashMap<u64, Arc<Progress>>>,
    pub(super) next_pull: AtomicU64,
    fs_usage: Mutex<Option<(Instant, FsUsage)>>,
    /// Image configs last read, by image id (content-addressed, so never
    /// stale): every pod start reads the pause's and its containers'.
    configs: Mutex<HashMap<String, Arc<[u8]>>>,
}

/// Image configs kept read at most.
const CONFIGS_KEPT: usize = 16;

impl ImageManager {
    /// Opens the store under `cfg.root`, clearing what a crash left behind:
    /// ingests, apply mounts, uncommitted snapshots, and content that no
    /// image references.
    pub fn open(cfg: ImageStoreConfig) -> Result<ImageManager, ImageError> {
        let content = ContentStore::open(&cfg.root).map_err(|e| {
            ImageError::io(format!("open content store in {}", cfg.root.display()), e)
        })?;
        let snapshots = Arc::new(Snapshots::open(&cfg.root)?);
        let records = Records::load(&cfg.root)?;
        let m = ImageManager {
            registry: RegistryClient::new(cfg.registry_config_dir.clone()),
            cfg,
            content,
            snapshots,
            records: RwLock::new(records),
            blob_locks: KeyedLocks::default(),
            chain_locks: KeyedLocks::default(),
            leases: Mutex::new(HashMap::new()),
            progress: Mutex::new(HashMap::new()),
            next_pull: AtomicU64::new(1),
            fs_usage: Mutex::new(None),
            configs: Mutex::new(HashMap::new()),
        };
        let (blobs, snaps) = m.collect_garbage()?;
        if blobs + snaps > 0 {
            tracing::info!(
                blobs,
                snapshots = snaps,
                "removed unreferenced content at start"
            );
        }
        Ok(m)
    }

    pub(super) fn records_read(&self) -> std::sync::RwLockReadGuard<'_, Records> {
        self.records.read().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn records_write(&self) -> std::sync::RwLockWriteGuard<'_, Records> {
        self.records.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Leases `keys` (digests, chain IDs) until the guard drops.
    pub(super) fn lease(&self, keys: Vec<String>) -> Lease<'_> {
        let mut leases = self.leases.lock().unwrap_or_else(|p| p.into_inner());
        for k in &keys {
            *leases.entry(k.clone()).or_insert(0) += 1;
        }
        Lease { owner: self, keys }
    }

    /// Finds an image by ID (`sha256:…` or bare hex), by reference
    /// (`repo:tag`, `repo@digest`, short forms normalized), or by a unique
    /// ID prefix of at least 6 hex digits.
    /// Reads registry hosts from `dir` from now on (a reload).
    pub fn set_registry_config_dir(&self, dir: std::path::PathBuf) {
        self.registry.set_config_dir(dir);
    }

    pub fn find(&self, spec: &str) -> Option<ImageRecord> {
        let spec = spec.trim();
        if spec.is_empty() {
            return None;
        }
        let recs = self.records_read();
        if let Some(r) = recs.get(spec) {
            return Some(r.clone());
        }
        if spec.len() == 64 && spec.bytes().all(|b| b.is_ascii_hexdigit()) {
            if let Some(r) = recs.get(&format!("sha256:{spec}")) {
                return Some(r.clone());
            }
        }
        if let Some(r) = Reference::parse(spec).ok().and_then(|r| match &r.digest {
            Some(d) => recs.by_ref(&r.with_digest(d)).cloned(),
            None => r.tagged().and_then(|t| recs.by_ref(&t).cloned()),
        }) {
            return Some(r);
        }
        // A unique prefix of an ID, as `crictl images` prints them (13
        // characters), tried after references, as containerd does.
        let hex = spec.strip_prefix("sha256:").unwrap_or(spec);
        if hex.len() < 6 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let mut found = recs.all().filter(|r| {
            r.id.strip_prefix("sha256:")
                .is_some_and(|h| h.starts_with(hex))
        });
        match (found.next(), found.next()) {
            (Some(r), None) => Some(r.clone()),
            _ => None,
        }
    }

    /// Every image's id, in no order.
    pub fn ids(&self) -> Vec<String> {
        self.records_read().all().map(|r| r.id.clone()).collect()
    }

    /// The image of an id, if it is still there.
    pub fn by_id(&self, id: &str) -> Option<ImageRecord> {
        self.records_read().get(id).cloned()
    }

    /// Every image, sorted by first reference for stable output.
    pub fn list(&self) -> Vec<ImageRecord> {
        let mut v: Vec<ImageRecord> = self.records_read().all().cloned().collect();
        v.sort_by(|a, b| a.refs().next().cmp(&b.refs().next()).then(a.id.cmp(&b.id)));
        v
    }

    /// The config blob of an image (for verbose status and containers).
    pub fn config_json(&self, rec: &ImageRecord) -> Result<Arc<[u8]>, ImageError> {
        let lock = || self.configs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = lock().get(&rec.id) {
            return Ok(c.clone());
        }
        let c: Arc<[u8]> = self.content.read(&rec.id)?.into();
        let mut kept = lock();
        if kept.len() >= CONFIGS_KEPT {
            kept.clear();
        }
        kept.insert(rec.id.clone(), c.clone());
        Ok(c)
    }

    /// Removes an image by ID, tag or digest: the whole image, then its
    /// unshared content. An unknown image is not an error (CRI).
    pub fn remove(&self, spec: &str) -> Result<Option<ImageRecord>, ImageError> {
        let Some(rec) = self.find(spec) else {
            return Ok(None);
        };
        // The image goes with all its tags and digests, whichever of them
        // named it, as containerd's CRI removes it (the kubelet's image GC
        // and critest expect no tag to outlive RemoveImage).
        self.records_write().delete(&rec.id)?;
        tracing::info!(image_id = %rec.id, tags = ?rec.repo_tags, "removed image");
        self.collect_garbage()?;
        Ok(Some(rec))
    }

    /// Deletes blobs and snapshots no image references and no pull leases.
    /// Returns (blobs, snapshots) removed.
    pub fn collect_garbage(&self) -> Result<(usize, usize), ImageError> {
        let mut dirs = Vec::new();
        let (mut nb, mut ns) = (0, 0);
        {
            let leases = self.leases.lock().unwrap_or_else(|p| p.into_inner());
            if leases.contains_key(ALL) {
                // An import is writing content it has not leased one by
                // one; collect at the next removal or start instead.
                return Ok((0, 0));
            }
            let recs = self.records_read();
            let mut live: HashSet<String> = HashSet::new();
            for r in recs.all() {
                live.extend(r.blobs().map(str::to_string));
                live.extend(r.chain_ids.iter().cloned());
            }
            for d in self
                .content
                .list()
                .map_err(|e| ImageError::io("list blobs", e))?
            {
                if !live.contains(&d) && !leases.contains_key(&d) {
                    self.content
                        .delete(&d)
                        .map_err(|e| ImageError::io(format!("delete blob {d}"), e))?;
                    nb += 1;
                }
            }
            for (chain, _) in self.snapshots.list()? {
                if !live.contains(&chain) && !leases.contains_key(&chain) {
                    dirs.push(chain);
                }
            }
            for chain in &dirs {
                self.snapshots.remove(chain)?;
                ns += 1;
            }
        }
        if nb + ns > 0 {
            *self.fs_usage.lock().unwrap_or_else(|p| p.into_inner()) = None;
        }
        Ok((nb, ns))
    }

    /// Bytes and inodes used by snapshots and content, cached for 5 s.
    pub fn fs_usage(&self) -> FsUsage {
        let mut cache = self.fs_usage.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, u)) = *cache {
            if at.elapsed() < Duration::from_secs(5) {
                return u;
            }
        }
        let (b1, i1) = crate::sys::disk_usage(self.snapshots.dir());
        let (b2, i2) = crate::sys::disk_usage(&self.cfg.root.join("content"));
        let u = FsUsage {
            timestamp_ns: now_ns(),
            bytes: b1 + b2,
            inodes: i1 + i2,
        };
        *cache = Some((Instant::now(), u));
        u
    }

    /// Where image filesystems live (for ImageFsInfo's mountpoint).
    pub fn fs_mountpoint(&self) -> PathBuf {
        self.snapshots.dir().to_path_buf()
    }

    /// The pulls in flight.
    pub fn pulls(&self) -> Vec<Arc<Progress>> {
        self.progress
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// A committed blob's path, when the store has it.
    pub fn blob_path(&self, digest: &str) -> Option<PathBuf> {
        self.content.has(digest).then(|| self.content.path(digest))
    }

    /// Stores `data` as the blob `digest` (verified against it).
    pub fn put_blob(&self, digest: &str, data: &[u8]) -> Result<(), ImageError> {
        self.content.put(digest, data)
    }

    /// The committed snapshot dirs of an image, bottom first (an empty dir
    /// for an image without filesystem layers).
    pub fn layer_dirs(&self, rec: &ImageRecord) -> Result<Vec<PathBuf>, ImageError> {
        if rec.chain_ids.is_empty() {
            return Ok(vec![self.snapshots.empty()?]);
        }
        rec.chain_ids
            .iter()
            .map(|c| {
                self.snapshots.get(c).ok_or_else(|| {
                    ImageError::Internal(format!("image {} lost snapshot {c}", rec.id))
                })
            })
            .collect()
    }

    /// Overlay mount options for a container rootfs of `rec`: its layers
    /// as the lower dirs (top layer first), `upper` and `work` its own.
    pub fn rootfs_options(
        &self,
        rec: &ImageRecord,
        upper: &Path,
        work: &Path,
    ) -> Result<String, ImageError> {
        let mut lowers = self.layer_dirs(rec)?;
        lowers.reverse();
        Ok(crate::sys::overlay_options(&lowers, upper, work))
    }

    /// Unused bytes counter for progress display.
    pub(super) fn progress_add(p: &Progress, n: u64) {
        p.bytes_done.fetch_add(n, Ordering::Relaxed);
    }
}
