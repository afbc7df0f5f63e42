//! The latest CPU sample of each container and pod, kept between stats
//! calls so that `usage_nano_cores` (a rate) is the difference of two.

use std::collections::HashMap;
use std::sync::Mutex;

/// The latest CPU sample per container or pod id.
#[derive(Default)]
pub struct CpuSamples {
    last: Mutex<HashMap<String, (u64, i64)>>,
}

impl CpuSamples {
    /// Records `(usage_ns, at_ns)` for `key` and returns the rate since the
    /// previous sample, in nanocores; None for a first sample, or when time
    /// did not advance or the counter went back (a new cgroup).
    pub fn rate(&self, key: &str, usage_ns: u64, at_ns: i64) -> Option<u64> {
        let mut m = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let prev = m.insert(key.to_string(), (usage_ns, at_ns));
        let (pu, pt) = prev?;
        let dt = at_ns - pt;
        if dt <= 0 || usage_ns < pu {
            return None;
        }
        Some(((usage_ns - pu) as f64 / dt as f64 * 1e9) as u64)
    }

    /// Forgets samples whose key `keep` rejects.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.last
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|k, _| keep(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nano_cores_need_two_samples() {
        let s = CpuSamples::default();
        assert_eq!(s.rate("c", 1_000_000_000, 10_000_000_000), None);
        // Half a core for two seconds.
        assert_eq!(
            s.rate("c", 2_000_000_000, 12_000_000_000),
            Some(500_000_000)
        );
        // Time did not move; the counter went back.
        assert_eq!(s.rate("c", 2_000_000_000, 12_000_000_000), None);
        assert_eq!(s.rate("c", 5, 13_000_000_000), None);
        s.retain(|k| k != "c");
        assert_eq!(s.rate("c", 10, 14_000_000_000), None);
    }
}
