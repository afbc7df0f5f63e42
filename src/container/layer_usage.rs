//! The bytes and inodes of each container's writable layer, walked at most
//! once per period and kept between stats calls. The kubelet asks for
//! every container's stats each housekeeping period; walking every
//! writable layer on each call would grow with the files of all of them.
//! containerd's CRI does the same (its snapshot usage is collected every
//! `stats_collect_period`, 10 s by default); the timestamp reported is when
//! the walk was made.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a walk's figures stand.
pub const PERIOD: Duration = Duration::from_secs(10);

/// One walk: when (monotonic, and in ns since the epoch), bytes, inodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Walked {
    pub at_ns: i64,
    pub bytes: u64,
    pub inodes: u64,
}

#[derive(Default)]
pub struct LayerUsage {
    last: Mutex<HashMap<String, (Instant, Walked)>>,
}

impl LayerUsage {
    /// The usage of container `id`'s layer at `upper`: the last walk if it
    /// is younger than `period`, else a new walk (made without the lock).
    pub fn get(&self, id: &str, upper: &Path, period: Duration) -> Walked {
        if let Some((when, w)) = self.lock().get(id) {
            if when.elapsed() < period {
                return *w;
            }
        }
        let (bytes, inodes) = crate::sys::disk_usage(upper);
        let w = Walked {
            at_ns: crate::sys::now_ns(),
            bytes,
            inodes,
        };
        self.lock().insert(id.to_string(), (Instant::now(), w));
        w
    }

    /// Forgets the layers whose container id `keep` rejects.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.lock().retain(|k, _| keep(k));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, Walked)>> {
        self.last.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layer_is_walked_once_a_period() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("a"), vec![0u8; 8192]).expect("write");
        let cache = LayerUsage::default();
        let first = cache.get("c", dir.path(), PERIOD);
        assert!(first.bytes >= 8192 && first.inodes >= 1, "{first:?}");
        std::fs::write(dir.path().join("b"), vec![0u8; 65536]).expect("write");
        // Within the period: the same walk.
        assert_eq!(cache.get("c", dir.path(), PERIOD), first);
        // Past it: walked again, the new file counted.
        let again = cache.get("c", dir.path(), Duration::ZERO);
        assert!(again.bytes >= first.bytes + 65536, "{again:?}");
        assert!(again.at_ns >= first.at_ns);
        cache.retain(|k| k != "c");
        assert!(cache.lock().is_empty());
    }
}
