//! Per-stage timing of the mutating RPCs.
//!
//! A [`Stages`] follows one operation (RunPodSandbox, a sandbox's removal,
//! a CNI ADD): [`Stages::end`] names the stage that just ended (the time
//! since the last one ended, or since the start), [`Stages::record`] adds
//! one measured elsewhere (a plugin's exec on another thread). Each stage is logged as it ends, a `stage` event with
//! its operation, name and milliseconds, and [`Stages::finish`] logs the
//! operation's summary at debug level and keeps its samples in a bounded
//! table per (operation, stage), the last [`KEEP`] of each, which
//! [`samples`] hands out (the admin API, `husk bench --breakdown`).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Samples kept per (operation, stage).
pub const KEEP: usize = 512;

/// The whole of an operation is kept under this stage name.
pub const TOTAL: &str = "total";

type Table = BTreeMap<(String, String), VecDeque<Duration>>;

static TABLE: Mutex<Table> = Mutex::new(BTreeMap::new());

fn keep(op: &str, stage: &str, d: Duration) {
    let mut t = TABLE.lock().unwrap_or_else(|p| p.into_inner());
    let q = t.entry((op.to_string(), stage.to_string())).or_default();
    if q.len() == KEEP {
        q.pop_front();
    }
    q.push_back(d);
}

/// The stages of one operation, in order.
pub struct Stages {
    op: &'static str,
    start: Instant,
    mark: Instant,
    done: Vec<(String, Duration)>,
}

impl Stages {
    /// Starts timing `op`.
    pub fn new(op: &'static str) -> Stages {
        let now = Instant::now();
        Stages {
            op,
            start: now,
            mark: now,
            done: Vec::new(),
        }
    }

    fn push(&mut self, name: String, d: Duration) {
        tracing::trace!(op = self.op, stage = %name, ms = d.as_secs_f64() * 1e3, "stage");
        self.done.push((name, d));
    }

    /// The stage that just ended is `name`.
    pub fn end(&mut self, name: impl Into<String>) {
        let now = Instant::now();
        let d = now - self.mark;
        self.mark = now;
        self.push(name.into(), d);
    }

    /// Adds a stage measured elsewhere; the one under way goes on.
    pub fn record(&mut self, name: impl Into<String>, d: Duration) {
        self.push(name.into(), d);
    }

    /// The stages ended so far.
    pub fn so_far(&self) -> &[(String, Duration)] {
        &self.done
    }

    /// Ends the operation: logs its summary and keeps its samples.
    pub fn finish(mut self) -> Vec<(String, Duration)> {
        let total = self.start.elapsed();
        let summary: Vec<String> = self
            .done
            .iter()
            .map(|(n, d)| format!("{n}={:.2}ms", d.as_secs_f64() * 1e3))
            .collect();
        tracing::debug!(
            op = self.op,
            ms = total.as_secs_f64() * 1e3,
            stages = %summary.join(" "),
            "timing"
        );
        for (n, d) in &self.done {
            keep(self.op, n, *d);
        }
        keep(self.op, TOTAL, total);
        std::mem::take(&mut self.done)
    }
}

/// One (operation, stage) and its kept samples, oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Samples {
    pub op: String,
    pub stage: String,
    pub samples: Vec<Duration>,
}

/// Every (operation, stage) with its samples; `clear` empties the table
/// after reading it (a benchmark's run starts from nothing).
pub fn samples(clear: bool) -> Vec<Samples> {
    let mut t = TABLE.lock().unwrap_or_else(|p| p.into_inner());
    let out = t
        .iter()
        .map(|((op, stage), q)| Samples {
            op: op.clone(),
            stage: stage.clone(),
            samples: q.iter().copied().collect(),
        })
        .collect();
    if clear {
        t.clear();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_are_timed_in_order_and_kept() {
        let mut s = Stages::new("TimingTestOp");
        std::thread::sleep(Duration::from_millis(2));
        s.end("first");
        s.record("elsewhere", Duration::from_millis(7));
        s.end("second");
        let done = s.finish();
        let names: Vec<&str> = done.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["first", "elsewhere", "second"]);
        assert!(done[0].1 >= Duration::from_millis(2), "{done:?}");
        assert_eq!(done[1].1, Duration::from_millis(7));
        let mine: Vec<Samples> = samples(false)
            .into_iter()
            .filter(|s| s.op == "TimingTestOp")
            .collect();
        let stages: Vec<&str> = mine.iter().map(|s| s.stage.as_str()).collect();
        assert_eq!(stages, ["elsewhere", "first", "second", TOTAL]);
        assert!(mine.iter().all(|s| s.samples.len() == 1));
        let total = mine
            .iter()
            .find(|s| s.stage == TOTAL)
            .unwrap_or_else(|| unreachable!());
        assert!(total.samples[0] >= done[0].1 + done[2].1);
    }

    #[test]
    fn the_table_keeps_the_last_samples() {
        for i in 0..(KEEP as u64 + 3) {
            keep("TimingTestBound", "s", Duration::from_micros(i));
        }
        let s = samples(false)
            .into_iter()
            .find(|s| s.op == "TimingTestBound")
            .unwrap_or_else(|| unreachable!());
        assert_eq!(s.samples.len(), KEEP);
        assert_eq!(s.samples[0], Duration::from_micros(3));
    }
}
