//! Exponential back-off per key, as the kubelet's flowcontrol.Backoff:
//! the first failure waits `initial`, each next one twice as long up to
//! `max`; an entry idle for twice `max` starts over. Used for container
//! restarts (CrashLoopBackOff) and image pulls (ImagePullBackOff).
//!
//! Times are wall-clock nanoseconds since the epoch, because the event
//! times come from the runtime (a container's `finished_at`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// Now, in nanoseconds since the epoch.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    backoff: Duration,
    last_update: i64,
}

pub struct Backoff {
    initial: Duration,
    max: Duration,
    entries: Mutex<HashMap<String, Entry>>,
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Backoff {
        Backoff {
            initial,
            max: max.max(initial),
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn expired(&self, e: &Entry, event_ns: i64) -> bool {
        event_ns.saturating_sub(e.last_update) > 2 * self.max.as_nanos() as i64
    }

    /// Records a failure at `event_ns`: starts or doubles the back-off.
    pub fn next(&self, key: &str, event_ns: i64) {
        let mut m = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let e = match m.get(key) {
            Some(e) if !self.expired(e, event_ns) => Entry {
                backoff: (e.backoff * 2).min(self.max),
                last_update: event_ns,
            },
            _ => Entry {
                backoff: self.initial,
                last_update: event_ns,
            },
        };
        m.insert(key.to_string(), e);
    }

    /// How much longer something that failed at `event_ns` must wait
    /// (None: it may go now).
    pub fn remaining_since(&self, key: &str, event_ns: i64) -> Option<Duration> {
        let m = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let e = m.get(key)?;
        if self.expired(e, event_ns) {
            return None;
        }
        let elapsed = now_ns().saturating_sub(event_ns).max(0) as u64;
        let b = e.backoff.as_nanos() as u64;
        (elapsed < b).then(|| Duration::from_nanos(b - elapsed))
    }

    /// How much longer since the last recorded failure.
    pub fn remaining_since_update(&self, key: &str) -> Option<Duration> {
        let last = {
            let m = self.entries.lock().unwrap_or_else(|e| e.into_inner());
            m.get(key)?.last_update
        };
        if self.expired(
            &Entry {
                backoff: Duration::ZERO,
                last_update: last,
            },
            now_ns(),
        ) {
            return None;
        }
        self.remaining_since(key, last)
    }

    /// The current back-off of a key.
    pub fn get(&self, key: &str) -> Option<Duration> {
        let m = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        m.get(key).map(|e| e.backoff)
    }

    pub fn reset(&self, key: &str) {
        let mut m = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        m.remove(key);
    }

    /// Drops entries idle for twice `max`, and those whose key starts with
    /// `prefix` when given (a removed pod).
    pub fn gc(&self, prefix: Option<&str>) {
        let now = now_ns();
        let mut m = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let max2 = 2 * self.max.as_nanos() as i64;
        m.retain(|k, e| {
            now.saturating_sub(e.last_update) <= max2 && !prefix.is_some_and(|p| k.starts_with(p))
        });
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn doubles_to_the_cap() {
        let b = Backoff::new(Duration::from_secs(10), Duration::from_secs(300));
        let t = now_ns();
        assert_eq!(b.remaining_since("k", t), None, "no failure yet");
        b.next("k", t);
        assert_eq!(b.get("k"), Some(Duration::from_secs(10)));
        assert!(b.remaining_since("k", t).unwrap() > Duration::from_secs(9));
        for _ in 0..10 {
            b.next("k", t);
        }
        assert_eq!(b.get("k"), Some(Duration::from_secs(300)));
        // An event long after the last update starts over.
        b.next("k", t + 601 * 1_000_000_000);
        assert_eq!(b.get("k"), Some(Duration::from_secs(10)));
        // A failure long ago is no longer in back-off.
        let old = t - 20 * 1_000_000_000;
        let c = Backoff::new(Duration::from_secs(10), Duration::from_secs(300));
        c.next("k", old);
        assert_eq!(c.remaining_since("k", old), None);
        c.gc(Some("k"));
        assert_eq!(c.get("k"), None);
    }
}
