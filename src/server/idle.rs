//! The idle server gives back what it holds resident without using it.
//!
//! Every RPC is counted in and out ([`enter`], from `observe`). Once RPCs
//! have come and gone (or the server has just started) and none has run
//! for [`QUIET`], the server trims itself once (`sys::trim_resident`):
//! freed heap goes back to the kernel, and the page-table entries of its
//! code are dropped. The code stays in the page cache, shared with the
//! shims, and is mapped back on its next use; what ran once (start-up,
//! recovery, a burst of pulls or pod starts) stops counting as the idle
//! server's memory.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long no RPC must have run before the server trims itself.
pub const QUIET: Duration = Duration::from_secs(2);

static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
static ENDED: AtomicU64 = AtomicU64::new(0);
/// Milliseconds since [`epoch`] at which the last RPC ended.
static LAST_END_MS: AtomicU64 = AtomicU64::new(0);

fn epoch() -> Instant {
    static START: OnceLock<Instant> = OnceLock::new();
    *START.get_or_init(Instant::now)
}

fn now_ms() -> u64 {
    epoch().elapsed().as_millis() as u64
}

/// One RPC in flight until dropped.
pub struct InFlight(());

impl Drop for InFlight {
    fn drop(&mut self) {
        LAST_END_MS.store(now_ms(), Ordering::Relaxed);
        ENDED.fetch_add(1, Ordering::Relaxed);
        IN_FLIGHT.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Counts an RPC in; it is counted out when the guard drops (also when
/// the client goes away mid-call).
pub fn enter() -> InFlight {
    IN_FLIGHT.fetch_add(1, Ordering::Relaxed);
    InFlight(())
}

/// Whether no RPC is in flight and none has ended for `d`.
pub fn quiet_for(d: Duration) -> bool {
    IN_FLIGHT.load(Ordering::Relaxed) == 0
        && now_ms().saturating_sub(LAST_END_MS.load(Ordering::Relaxed)) >= d.as_millis() as u64
}

/// Whether a trim is due: nothing in flight, quiet for [`QUIET`], and RPCs
/// ended since the last trim (`trimmed`, the count then).
fn due(in_flight: usize, ended: u64, trimmed: Option<u64>, quiet_ms: u64) -> bool {
    in_flight == 0 && trimmed != Some(ended) && quiet_ms >= QUIET.as_millis() as u64
}

/// Starts the task that trims the server whenever it has gone quiet.
pub fn spawn_trimmer() {
    epoch();
    tokio::spawn(async {
        let mut trimmed: Option<u64> = None;
        loop {
            tokio::time::sleep(QUIET / 2).await;
            let ended = ENDED.load(Ordering::Relaxed);
            let quiet = now_ms().saturating_sub(LAST_END_MS.load(Ordering::Relaxed));
            if due(IN_FLIGHT.load(Ordering::Relaxed), ended, trimmed, quiet) {
                let _ = tokio::task::spawn_blocking(crate::sys::trim_resident).await;
                trimmed = Some(ended);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_once_per_quiet_spell() {
        let q = QUIET.as_millis() as u64;
        // Just started: once quiet, a first trim.
        assert!(!due(0, 0, None, q - 1));
        assert!(due(0, 0, None, q));
        // Trimmed at 0 ended RPCs: not again until more have ended.
        assert!(!due(0, 0, Some(0), q * 10));
        assert!(due(0, 3, Some(0), q));
        // Never while an RPC runs (a long pull, a follower).
        assert!(!due(1, 3, Some(0), q * 10));
    }
}
