//! Image garbage collection, as the kubelet's image GC manager does it.
//!
//! Every run records each image the runtime has (first seen, last used:
//! an image a container of the runtime uses is used now). When the image
//! file system's usage (from ImageFsInfo's mount point: 100 − available ×
//! 100 / capacity) reaches `--image-gc-high-threshold`, images are removed
//! until usage is back at `--image-gc-low-threshold`: unused ones only,
//! least recently used first, never a pinned one or one first seen less
//! than `--minimum-image-ttl-duration` ago, nor the sandbox image
//! (`--pod-infra-container-image`). When not enough can be freed,
//! a `FreeDiskSpaceFailed` warning is recorded on the node. The eviction
//! manager frees images the same way before it evicts a pod for disk.

use crate::kubelet::kit::node_config::ImageGc as Policy;
use crate::kubelet::kit::recorder::{Recorder, WARNING};
use crate::kubelet::kit::runtime::Cri;
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Instant;

#[derive(Debug, Clone, Copy)]
struct Seen {
    first: Instant,
    last_used: Instant,
}

/// Capacity and available bytes of the file system at `path`.
pub fn fs_space(path: &str) -> Option<(u64, u64)> {
    let s = rustix::fs::statvfs(path).ok()?;
    Some((s.f_blocks * s.f_frsize, s.f_bavail * s.f_frsize))
}

pub struct ImageGc {
    cri: Cri,
    policy: Policy,
    events: Recorder,
    node: String,
    seen: Mutex<HashMap<String, Seen>>,
}

/// What one collection did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Freed {
    pub bytes: u64,
    pub removed: Vec<String>,
}

impl ImageGc {
    pub fn new(cri: Cri, policy: Policy, events: Recorder, node: &str) -> ImageGc {
        ImageGc {
            cri,
            policy,
            events,
            node: node.into(),
            seen: Mutex::new(HashMap::new()),
        }
    }

    pub fn period(&self) -> std::time::Duration {
        self.policy.period
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Seen>> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Images the runtime's containers use (by ID, tag or digest).
    async fn in_use(&self) -> Result<HashSet<String>, String> {
        let cs = self
            .cri
            .list_containers(HashMap::new())
            .await
            .map_err(|e| e.to_string())?;
        let mut used = HashSet::new();
        used.extend(self.policy.sandbox_image.clone());
        for c in cs {
            used.insert(c.image_ref);
            if let Some(i) = c.image {
                used.insert(i.image);
            }
        }
        Ok(used)
    }

    /// Removes unused images, least recently used first, until `want`
    /// bytes are freed.
    pub async fn free(&self, want: u64) -> Result<Freed, String> {
        let images = self.cri.list_images().await.map_err(|e| e.to_string())?;
        let used = self.in_use().await?;
        let now = Instant::now();
        let mut candidates = Vec::new();
        {
            let mut seen = self.lock();
            seen.retain(|id, _| images.iter().any(|i| &i.id == id));
            for i in &images {
                let e = seen.entry(i.id.clone()).or_insert(Seen {
                    first: now,
                    last_used: now,
                });
                let in_use = used.contains(&i.id)
                    || i.repo_tags.iter().any(|t| used.contains(t))
                    || i.repo_digests.iter().any(|d| used.contains(d));
                if in_use {
                    e.last_used = now;
                    continue;
                }
                if i.pinned || now.duration_since(e.first) < self.policy.min_age {
                    continue;
                }
                candidates.push((e.last_used, e.first, i.id.clone(), i.size));
            }
        }
        candidates.sort();
        let mut freed = Freed::default();
        for (_, _, id, size) in candidates {
            if freed.bytes >= want {
                break;
            }
            match self.cri.remove_image(&id).await {
                Ok(()) => {
                    tracing::info!(image = %id, size, "image garbage collected");
                    self.lock().remove(&id);
                    freed.bytes += size;
                    freed.removed.push(id);
                }
                Err(e) => tracing::warn!(image = %id, error = %e, "image GC: remove failed"),
            }
        }
        Ok(freed)
    }

    /// The periodic run: frees down to the low threshold once usage has
    /// reached the high one.
    pub async fn collect(&self) -> Result<Freed, String> {
        let fs = self
            .cri
            .image_fs()
            .await
            .map_err(|e| e.to_string())?
            .ok_or("the runtime reports no image file system")?;
        let (cap, avail) = fs_space(&fs.mountpoint)
            .ok_or_else(|| format!("cannot stat the image file system {}", fs.mountpoint))?;
        let Some(want) = to_free(cap, avail, &self.policy) else {
            // Still record images, so their ages count from now.
            return self.free(0).await;
        };
        tracing::info!(
            capacity = cap,
            available = avail,
            want,
            "image file system over the high threshold"
        );
        let freed = self.free(want).await?;
        if freed.bytes < want {
            let msg = format!(
                "Failed to garbage collect required amount of images. Attempted to free {want} bytes, but only found {} bytes eligible to free.",
                freed.bytes
            );
            self.events
                .node(&self.node, WARNING, "FreeDiskSpaceFailed", &msg);
            return Err(msg);
        }
        Ok(freed)
    }
}

/// Bytes to free for `policy` on a file system of `cap` bytes with
/// `avail` free; None below the high threshold.
pub fn to_free(cap: u64, avail: u64, policy: &Policy) -> Option<u64> {
    if cap == 0 {
        return None;
    }
    let usage = 100 - (avail.min(cap) * 100 / cap);
    if usage < policy.high as u64 {
        return None;
    }
    let target_avail = cap * (100 - policy.low as u64) / 100;
    Some(target_avail.saturating_sub(avail))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frees_from_high_down_to_low() {
        let p = Policy::default();
        assert_eq!(to_free(1000, 200, &p), None, "80% used is below 85%");
        assert_eq!(to_free(1000, 100, &p), Some(100), "90% used frees to 80%");
        assert_eq!(to_free(0, 0, &p), None);
        let all = Policy {
            high: 0,
            low: 0,
            ..Policy::default()
        };
        assert_eq!(to_free(1000, 400, &all), Some(600));
    }
}
