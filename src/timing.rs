//! Per-stage timing of the mutating RPCs.
//!
//! A [`Stages`] follows one operation (RunPodSandbox, a sandbox's removal,
//! a CNI ADD): [`Stages::end`] names the stage of husk's own work that just
//! ended (the time since the last one ended, or since the start);
//! [`Stages::end_external`] one spent waiting on something that is not
//! husk (the CNI plugins, the payload's processes being made by the
//! runtime library); [`Stages::end_split`] one whose tail was external,
//! measured by whoever did it (the shim says how long libcontainer took).
//! The stages of an operation add up to its whole, so husk's own share is
//! the whole minus the external stages.
//!
//! Each stage is a `stage` event inside the operation's span, and, when
//! the call is traced, an OpenTelemetry span (`crate::otel`): a child of
//! the call's span, or of a span of the operation's own when it is not the
//! call (a CNI ADD inside RunPodSandbox). Then
//! [`Stages::finish`] logs the operation's summary at debug level and keeps
//! its samples in a bounded table per (operation, stage), the last [`KEEP`]
//! of each. [`keep`] adds a whole measured elsewhere (the server keeps each
//! mutating RPC's under [`RPC`]); [`samples`] hands the table out (the admin
//! API's Timings, `husk bench --breakdown`).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Samples kept per (operation, stage).
pub const KEEP: usize = 512;

/// The whole of an operation is kept under this stage name.
pub const TOTAL: &str = "total";

/// The whole of a mutating RPC, as the server saw it (from the request
/// decoded to the answer), is kept under this stage name.
pub const RPC: &str = "rpc";

/// Whether a stage is husk's own work or a wait on something else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Own,
    External,
}

#[derive(Default)]
struct Kept {
    external: bool,
    samples: VecDeque<Duration>,
}

type Table = BTreeMap<(String, String), Kept>;

static TABLE: Mutex<Table> = Mutex::new(BTreeMap::new());

/// Keeps one sample of (`op`, `stage`), dropping the oldest past [`KEEP`].
pub fn keep(op: &str, stage: &str, kind: Kind, d: Duration) {
    let mut t = TABLE.lock().unwrap_or_else(|p| p.into_inner());
    let q = t.entry((op.to_string(), stage.to_string())).or_default();
    q.external = kind == Kind::External;
    if q.samples.len() == KEEP {
        q.samples.pop_front();
    }
    q.samples.push_back(d);
}

/// The stages of one operation, in order.
pub struct Stages {
    op: &'static str,
    span: tracing::Span,
    start: Instant,
    mark: Instant,
    done: Vec<(String, Kind, Duration)>,
    otel: Option<Traced>,
}

/// Where a traced operation's stage spans go, and its start's wall time.
struct Traced {
    parent: opentelemetry::Context,
    /// The operation's own span, when it is not the call's.
    own: bool,
    wall: std::time::SystemTime,
}

impl Stages {
    /// Starts timing `op`.
    pub fn new(op: &'static str) -> Stages {
        let now = Instant::now();
        Stages {
            op,
            span: tracing::debug_span!("timing", op),
            start: now,
            mark: now,
            done: Vec::new(),
            otel: crate::otel::current().map(|cx| Traced::new(cx, op)),
        }
    }

    /// `d`, the stage that ended `before_mark` before the last mark.
    fn push(&mut self, name: String, kind: Kind, d: Duration, before_mark: Duration) {
        let _in = self.span.enter();
        let external = kind == Kind::External;
        tracing::trace!(stage = %name, external, ms = d.as_secs_f64() * 1e3, "stage");
        if let Some(t) = &self.otel {
            let end = t.wall + (self.mark - self.start).saturating_sub(before_mark);
            crate::otel::finished(
                &t.parent,
                name.clone(),
                end.checked_sub(d).unwrap_or(end),
                end,
                vec![opentelemetry::KeyValue::new(
                    "husk.stage.external",
                    external,
                )],
            );
        }
        self.done.push((name, kind, d));
    }

    fn lap(&mut self) -> Duration {
        let now = Instant::now();
        let d = now - self.mark;
        self.mark = now;
        d
    }

    /// The stage of husk's own work that just ended is `name`.
    pub fn end(&mut self, name: impl Into<String>) {
        let d = self.lap();
        self.push(name.into(), Kind::Own, d, Duration::ZERO);
    }

    /// The stage that just ended, `name`, waited on something not husk.
    pub fn end_external(&mut self, name: impl Into<String>) {
        let d = self.lap();
        self.push(name.into(), Kind::External, d, Duration::ZERO);
    }

    /// The stage that just ended was husk's (`own`) but for its last
    /// `external`, which something else spent (`outside`): both are kept.
    pub fn end_split(
        &mut self,
        own: impl Into<String>,
        outside: impl Into<String>,
        external: Duration,
    ) {
        let d = self.lap();
        let external = external.min(d);
        self.push(own.into(), Kind::Own, d - external, external);
        self.push(outside.into(), Kind::External, external, Duration::ZERO);
    }

    /// Ends the operation: logs its summary and keeps its samples.
    pub fn finish(mut self) -> Vec<(String, Duration)> {
        let total = self.start.elapsed();
        let external: Duration = self
            .done
            .iter()
            .filter(|(_, k, _)| *k == Kind::External)
            .map(|(_, _, d)| *d)
            .sum();
        let summary: Vec<String> = self
            .done
            .iter()
            .map(|(n, k, d)| {
                let mark = if *k == Kind::External { "*" } else { "" };
                format!("{n}{mark}={:.2}ms", d.as_secs_f64() * 1e3)
            })
            .collect();
        {
            let _in = self.span.enter();
            tracing::debug!(
                ms = total.as_secs_f64() * 1e3,
                own_ms = total.saturating_sub(external).as_secs_f64() * 1e3,
                stages = %summary.join(" "),
                "timing"
            );
        }
        for (n, k, d) in &self.done {
            keep(self.op, n, *k, *d);
        }
        keep(self.op, TOTAL, Kind::Own, total);
        if let Some(t) = self.otel.take().filter(|t| t.own) {
            use opentelemetry::trace::TraceContextExt as _;
            t.parent.span().end();
        }
        std::mem::take(&mut self.done)
            .into_iter()
            .map(|(n, _, d)| (n, d))
            .collect()
    }
}

impl Traced {
    /// Stages of `op` under `cx`'s span, or under a span of `op` itself
    /// when `cx`'s is not the call `op` names.
    fn new(cx: opentelemetry::Context, op: &str) -> Traced {
        let wall = std::time::SystemTime::now();
        let call = cx
            .get::<crate::otel::propagate::RpcPath>()
            .is_some_and(|p| p.0.rsplit('/').next() == Some(op));
        let own = if call {
            None
        } else {
            crate::otel::child(
                &cx,
                op,
                opentelemetry::trace::SpanKind::Internal,
                wall,
                vec![],
            )
        };
        Traced {
            own: own.is_some(),
            parent: own.unwrap_or(cx),
            wall,
        }
    }
}

/// One (operation, stage) and its kept samples, oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Samples {
    pub op: String,
    pub stage: String,
    /// A wait on something not husk (plugins, the payload).
    pub external: bool,
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
            external: q.external,
            samples: q.samples.iter().copied().collect(),
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
        std::thread::sleep(Duration::from_millis(3));
        s.end_split("second", "elsewhere", Duration::from_millis(2));
        s.end_external("waited");
        let done = s.finish();
        let names: Vec<&str> = done.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["first", "second", "elsewhere", "waited"]);
        assert!(done[0].1 >= Duration::from_millis(2), "{done:?}");
        assert!(done[1].1 >= Duration::from_millis(1), "{done:?}");
        assert_eq!(done[2].1, Duration::from_millis(2));
        let mine: Vec<Samples> = samples(false)
            .into_iter()
            .filter(|s| s.op == "TimingTestOp")
            .collect();
        let stages: Vec<&str> = mine.iter().map(|s| s.stage.as_str()).collect();
        assert_eq!(stages, ["elsewhere", "first", "second", TOTAL, "waited"]);
        assert!(mine.iter().all(|s| s.samples.len() == 1));
        let external: Vec<&str> = mine
            .iter()
            .filter(|s| s.external)
            .map(|s| s.stage.as_str())
            .collect();
        assert_eq!(external, ["elsewhere", "waited"]);
        let total = mine
            .iter()
            .find(|s| s.stage == TOTAL)
            .unwrap_or_else(|| unreachable!());
        let sum: Duration = done.iter().map(|(_, d)| *d).sum();
        assert!(total.samples[0] >= sum, "{total:?} {done:?}");
    }

    #[test]
    fn the_table_keeps_the_last_samples() {
        for i in 0..(KEEP as u64 + 3) {
            keep("TimingTestBound", "s", Kind::Own, Duration::from_micros(i));
        }
        let s = samples(false)
            .into_iter()
            .find(|s| s.op == "TimingTestBound")
            .unwrap_or_else(|| unreachable!());
        assert_eq!(s.samples.len(), KEEP);
        assert_eq!(s.samples[0], Duration::from_micros(3));
    }
}
