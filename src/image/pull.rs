//! PullImage: resolve, fetch in parallel, unpack in order, record.
//!
//! Invariants: every blob is verified (size, digest) before it is committed
//! to the content store; every layer's uncompressed digest is checked
//! against the config's diff ID before its snapshot is committed; the image
//! record is written last. Concurrent pulls share downloads and unpacks
//! through per-blob and per-chain locks.

use super::auth::Credentials;
use super::error::ImageError;
use super::follow::{Feed, FeedState, FollowReader};
use super::manager::{ImageManager, Progress};
use super::manifest::{self, Descriptor, Document, ImageConfig, Manifest};
use super::records::{ImageRecord, RECORD_VERSION};
use super::snapshot::chain_ids;
use crate::reference::Reference;
use crate::sys::now_ns;
use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Aborts spawned downloads when a pull ends early.
struct AbortAll(Vec<Option<JoinHandle<Result<(), ImageError>>>>);

impl Drop for AbortAll {
    fn drop(&mut self) {
        for h in self.0.iter().flatten() {
            h.abort();
        }
    }
}

/// Removes the pull's progress entry when it ends.
struct ProgressGuard<'a> {
    owner: &'a ImageManager,
    id: u64,
    progress: Arc<Progress>,
}

impl Drop for ProgressGuard<'_> {
    fn drop(&mut self) {
        crate::metrics::get()
            .pull_bytes
            .inc_by(self.progress.bytes_done.load(Ordering::Relaxed));
        self.owner
            .progress
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.id);
    }
}

/// One layer download.
struct BlobJob {
    reference: Reference,
    desc: Descriptor,
    creds: Credentials,
    progress: Arc<Progress>,
    permits: Arc<tokio::sync::Semaphore>,
    feed: watch::Sender<Feed>,
    /// Downloads take slots in `order`; `turn` says whose turn it is.
    turn: Arc<watch::Sender<usize>>,
    order: usize,
}

/// What a pull or an import hands to `install`.
pub(super) struct Prepared {
    pub names: Vec<String>,
    pub digests: Vec<String>,
    pub manifest_digest: String,
    pub manifest: Manifest,
    pub manifest_size: u64,
    pub index_digest: Option<String>,
    pub config: ImageConfig,
}

impl ImageManager {
    /// Pulls `reference` and returns the stored image.
    pub async fn pull(
        self: &Arc<Self>,
        reference: &str,
        creds: &Credentials,
    ) -> Result<ImageRecord, ImageError> {
        let r = Reference::parse(reference)?;
        let pid = self.next_pull.fetch_add(1, Ordering::Relaxed);
        let progress = Arc::new(Progress {
            reference: r.to_string(),
            ..Progress::default()
        });
        self.progress
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(pid, progress.clone());
        let guard = ProgressGuard {
            owner: self,
            id: pid,
            progress,
        };

        let top = self.registry.fetch_manifest(&r, r.object(), creds).await?;
        let (fetched, index_digest) = match Document::parse(&top.body, top.content_type.as_deref())?
        {
            Document::Index(idx) => {
                let want = manifest::host_platform();
                let desc = manifest::select_platform(&idx, &want).ok_or_else(|| {
                    ImageError::NotFound(format!(
                        "{r}: no manifest for platform {}/{}{}",
                        want.os,
                        want.architecture,
                        want.variant
                            .as_deref()
                            .map(|v| format!("/{v}"))
                            .unwrap_or_default()
                    ))
                })?;
                let m = self
                    .registry
                    .fetch_manifest(&r, &desc.digest, creds)
                    .await?;
                if m.body.len() as u64 != desc.size {
                    return Err(ImageError::SizeMismatch {
                        digest: desc.digest.clone(),
                        expected: desc.size,
                        actual: m.body.len() as u64,
                    });
                }
                self.content.put(&top.digest, &top.body)?;
                (m, Some(top.digest.clone()))
            }
            Document::Manifest(_) => (top.clone(), None),
        };
        let manifest = match Document::parse(&fetched.body, fetched.content_type.as_deref())? {
            Document::Manifest(m) => m,
            Document::Index(_) => {
                return Err(ImageError::Invalid(format!(
                    "{r}: an index names another index"
                )))
            }
        };
        let _lease = self.lease(
            manifest
                .layers
                .iter()
                .map(|l| l.digest.clone())
                .chain([manifest.config.digest.clone(), fetched.digest.clone()])
                .chain(index_digest.clone())
                .collect(),
        );
        self.content.put(&fetched.digest, &fetched.body)?;
        let config_bytes = self.fetch_small_blob(&r, &manifest.config, creds).await?;
        let config: ImageConfig = serde_json::from_slice(&config_bytes)
            .map_err(|e| ImageError::Invalid(format!("{r}: bad image config: {e}")))?;

        let repo_digest = r.with_digest(&top.digest);
        let prepared = Prepared {
            names: r.tagged().into_iter().collect(),
            digests: vec![repo_digest],
            manifest_digest: fetched.digest.clone(),
            manifest_size: fetched.body.len() as u64,
            manifest,
            index_digest,
            config,
        };
        let rec = self
            .install(prepared, Some((&r, creds)), &guard.progress)
            .await?;
        tracing::info!(image_ref = %r, image_id = %rec.id, "pulled image");
        Ok(rec)
    }

    async fn fetch_small_blob(
        &self,
        r: &Reference,
        desc: &Descriptor,
        creds: &Credentials,
    ) -> Result<Vec<u8>, ImageError> {
        let _lock = self.blob_locks.lock(&desc.digest).await;
        if self.content.has(&desc.digest) {
            return self.content.read(&desc.digest);
        }
        if desc.size > 16 << 20 {
            return Err(ImageError::Invalid(format!(
                "config blob {} is too large",
                desc.digest
            )));
        }
        let resp = self.registry.open_blob(r, &desc.digest, creds).await?;
        let url = resp.url().to_string();
        let body = resp.bytes().await.map_err(|e| ImageError::Transport {
            url,
            message: e.to_string(),
        })?;
        self.content.put(&desc.digest, &body)?;
        Ok(body.to_vec())
    }

    /// Streams one blob into the content store, once however many pulls
    /// ask for it at the same time.
    async fn fetch_blob(self: Arc<Self>, job: BlobJob) -> Result<(), ImageError> {
        let BlobJob {
            reference,
            desc,
            creds,
            progress,
            permits,
            feed,
            turn,
            order,
        } = job;
        // Take download slots in layer order: the lowest layers gate every
        // unpack, so they must not queue behind higher ones.
        let r = async {
            let _ = turn.subscribe().wait_for(|n| *n >= order).await;
            let permit = permits
                .acquire_owned()
                .await
                .map_err(|_| ImageError::Internal("download limiter closed".into()))?;
            turn.send_modify(|n| *n = (*n).max(order + 1));
            self.download(reference, &desc, creds, progress, &feed)
                .await
                .inspect(|_| drop(permit))
        }
        .await;
        feed.send_modify(|f| {
            f.state = if r.is_ok() {
                FeedState::Committed
            } else {
                FeedState::Failed
            }
        });
        r
    }

    async fn download(
        &self,
        r: Reference,
        desc: &Descriptor,
        creds: Credentials,
        progress: Arc<Progress>,
        feed: &watch::Sender<Feed>,
    ) -> Result<(), ImageError> {
        let _lock = self.blob_locks.lock(&desc.digest).await;
        if self.content.has(&desc.digest) {
            ImageManager::progress_add(&progress, desc.size);
            return Ok(());
        }
        tracing::debug!(blob = %desc.digest, "download starting");
        let mut resp = self.registry.open_blob(&r, &desc.digest, &creds).await?;
        tracing::debug!(blob = %desc.digest, "download answered");
        if let Some(len) = resp.content_length() {
            if len != desc.size {
                return Err(ImageError::SizeMismatch {
                    digest: desc.digest.clone(),
                    expected: desc.size,
                    actual: len,
                });
            }
        }
        let url = resp.url().to_string();
        let mut w = self.content.writer(&desc.digest, Some(desc.size))?;
        feed.send_modify(|f| f.path = Some(w.ingest_path().to_path_buf()));
        let mut published = 0u64;
        loop {
            let chunk = tokio::time::timeout(self.cfg.stall_timeout, resp.chunk())
                .await
                .map_err(|_| {
                    ImageError::Timeout(format!(
                        "blob {} from {url}: no data for {:?}",
                        desc.digest, self.cfg.stall_timeout
                    ))
                })?
                .map_err(|e| ImageError::Transport {
                    url: url.clone(),
                    message: e.to_string(),
                })?;
            let Some(chunk) = chunk else { break };
            w.write_all(&chunk).map_err(|e| match e.kind() {
                std::io::ErrorKind::InvalidData => ImageError::SizeMismatch {
                    digest: desc.digest.clone(),
                    expected: desc.size,
                    actual: w.written() + chunk.len() as u64,
                },
                _ => ImageError::io(format!("write blob {}", desc.digest), e),
            })?;
            ImageManager::progress_add(&progress, chunk.len() as u64);
            // Let a follower unpack what has arrived, a megabyte at a time.
            if w.written() - published >= 1 << 20 {
                w.flush()
                    .map_err(|e| ImageError::io(format!("write blob {}", desc.digest), e))?;
                published = w.written();
                feed.send_modify(|f| f.written = published);
            }
        }
        let r = tokio::task::block_in_place(|| w.commit());
        tracing::debug!(blob = %desc.digest, ok = r.is_ok(), "download done");
        r
    }

    /// Fetches (when `source` is given) and unpacks the layers of a
    /// prepared image, then writes its record.
    pub(super) async fn install(
        self: &Arc<Self>,
        p: Prepared,
        source: Option<(&Reference, &Credentials)>,
        progress: &Arc<Progress>,
    ) -> Result<ImageRecord, ImageError> {
        // What is not a filesystem layer (a WebAssembly module, an
        // artifact) is kept as a blob, not unpacked, as containerd does.
        let (layers, artifacts): (Vec<Descriptor>, Vec<Descriptor>) = p
            .manifest
            .layers
            .iter()
            .cloned()
            .partition(|l| super::manifest::is_layer(&l.media_type));
        let layers = &layers;
        let diff_ids = &p.config.rootfs.diff_ids;
        if layers.len() != diff_ids.len() {
            return Err(ImageError::Invalid(format!(
                "image has {} layers but its config lists {} diff IDs",
                layers.len(),
                diff_ids.len()
            )));
        }
        for d in diff_ids {
            crate::reference::validate_digest(d).map_err(ImageError::Invalid)?;
        }
        let chains = chain_ids(diff_ids);
        let _lease = self.lease(chains.clone());
        progress
            .bytes_total
            .store(layers.iter().map(|l| l.size).sum(), Ordering::Relaxed);
        progress
            .layers_total
            .store(layers.len() as u64, Ordering::Relaxed);

        // Start every needed download now; unpack below as each arrives.
        let permits = Arc::new(tokio::sync::Semaphore::new(
            self.cfg.max_concurrent_downloads,
        ));
        let mut downloads = AbortAll(Vec::with_capacity(layers.len()));
        let mut feeds = Vec::with_capacity(layers.len());
        let turn = Arc::new(watch::channel(0usize).0);
        let mut spawned = 0;
        for (layer, chain) in layers.iter().zip(&chains) {
            let need = self.snapshots.get(chain).is_none() && !self.content.has(&layer.digest);
            let (tx, rx) = watch::channel(Feed::default());
            feeds.push(need.then_some(rx));
            let handle = match (need, source) {
                (true, Some((r, creds))) => {
                    spawned += 1;
                    Some(tokio::spawn(self.clone().fetch_blob(BlobJob {
                        reference: r.clone(),
                        desc: layer.clone(),
                        creds: creds.clone(),
                        progress: progress.clone(),
                        permits: permits.clone(),
                        feed: tx,
                        turn: turn.clone(),
                        order: spawned - 1,
                    })))
                }
                (true, None) => {
                    return Err(ImageError::Invalid(format!(
                        "layer {} is missing",
                        layer.digest
                    )))
                }
                (false, _) => {
                    ImageManager::progress_add(progress, layer.size);
                    None
                }
            };
            downloads.0.push(handle);
        }

        let started = std::time::Instant::now();
        let mut parents = Vec::with_capacity(layers.len());
        for (i, (layer, chain)) in layers.iter().zip(&chains).enumerate() {
            let _lock = self.chain_locks.lock(chain).await;
            let dir = match self.snapshots.get(chain) {
                Some(dir) => {
                    // Another pull made it meanwhile; a download we started
                    // for it still has to finish cleanly.
                    if let Some(h) = downloads.0[i].take() {
                        h.await
                            .map_err(|e| ImageError::Internal(format!("download task: {e}")))??;
                    }
                    dir
                }
                None => {
                    let blob = self.content.path(&layer.digest);
                    let feed = feeds[i].take();
                    let snapshots = self.snapshots.clone();
                    let lower = parents.clone();
                    // Unpack while the blob streams in (or from the store).
                    let applied = tokio::task::spawn_blocking(move || {
                        let reader: Box<dyn std::io::Read + Send> = match feed {
                            Some(rx) => Box::new(FollowReader::new(rx, blob)),
                            None => Box::new(std::fs::File::open(&blob).map_err(|e| {
                                ImageError::io(format!("open layer {}", blob.display()), e)
                            })?),
                        };
                        snapshots.apply(&lower, reader)
                    })
                    .await
                    .map_err(|e| ImageError::Internal(format!("unpack task: {e}")))?;
                    let downloaded = match downloads.0[i].take() {
                        Some(h) => h
                            .await
                            .map_err(|e| ImageError::Internal(format!("download task: {e}")))?,
                        None => Ok(()),
                    };
                    tracing::debug!(layer = %layer.digest, ms = started.elapsed().as_millis() as u64, "layer downloaded");
                    let prepared = match (applied, downloaded) {
                        (applied, Err(e)) => {
                            if let Ok(p) = applied {
                                self.snapshots.discard(p);
                            }
                            return Err(e);
                        }
                        (Err(e), Ok(())) => return Err(e),
                        (Ok(p), Ok(())) => p,
                    };
                    if prepared.applied.diff_id != diff_ids[i] {
                        let actual = prepared.applied.diff_id.clone();
                        self.snapshots.discard(prepared);
                        tracing::warn!(layer = %layer.digest, expected = %diff_ids[i], %actual, "layer diff ID mismatch");
                        return Err(ImageError::DigestMismatch {
                            expected: diff_ids[i].clone(),
                            actual,
                        });
                    }
                    let snapshots = self.snapshots.clone();
                    let chain_id = chain.clone();
                    tokio::task::spawn_blocking(move || snapshots.commit(prepared, &chain_id))
                        .await
                        .map_err(|e| ImageError::Internal(format!("commit task: {e}")))??
                }
            };
            tracing::debug!(layer = %layer.digest, ms = started.elapsed().as_millis() as u64, "layer ready");
            progress.layers_done.fetch_add(1, Ordering::Relaxed);
            parents.push(dir);
        }

        for a in &artifacts {
            if self.content.has(&a.digest) {
                ImageManager::progress_add(progress, a.size);
                continue;
            }
            let Some((r, creds)) = source else {
                return Err(ImageError::Invalid(format!("blob {} is missing", a.digest)));
            };
            let (feed, _) = watch::channel(Feed::default());
            self.clone()
                .fetch_blob(BlobJob {
                    reference: r.clone(),
                    desc: a.clone(),
                    creds: creds.clone(),
                    progress: progress.clone(),
                    permits: permits.clone(),
                    feed,
                    turn: turn.clone(),
                    order: spawned,
                })
                .await?;
            spawned += 1;
        }

        let user = p
            .config
            .config
            .as_ref()
            .and_then(|c| c.user.clone())
            .unwrap_or_default();
        let rec = ImageRecord {
            version: RECORD_VERSION,
            id: p.manifest.config.digest.clone(),
            repo_tags: p.names,
            repo_digests: p.digests,
            manifest_digest: p.manifest_digest,
            index_digest: p.index_digest,
            layers: layers.iter().map(|l| l.digest.clone()).collect(),
            artifacts: artifacts.iter().map(|l| l.digest.clone()).collect(),
            chain_ids: chains,
            size: p.manifest_size
                + p.manifest.config.size
                + p.manifest.layers.iter().map(|l| l.size).sum::<u64>(),
            user,
            pinned: false,
            created_ns: now_ns(),
        };
        self.records_write().put(rec)
    }
}
