//! husk's Prometheus metrics, kept with the maintained client library
//! (`prometheus-client`) and served in the text exposition format by the
//! server (`server/prometheus/`) when `[metrics] address` is set.
//!
//! The counters and histograms are the process's (as a library's default
//! registry is): the code that does the work counts it whether or not an
//! endpoint serves them. What is a state rather than an event (pods and
//! containers by state, the process's memory, CPU and descriptors) is read
//! at each scrape (`server/prometheus/collect.rs`). No label takes an unbounded value: RPC
//! methods and gRPC codes, image pull results, CNI operations.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::OnceLock;
use std::time::Duration;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Rpc {
    pub method: String,
    pub code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Method {
    pub method: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Outcome {
    /// "ok", or the gRPC code of the failure.
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Op {
    pub op: String,
}

/// Every event metric husk keeps.
pub struct Metrics {
    pub rpcs: Family<Rpc, Counter>,
    pub rpc_seconds: Family<Method, Histogram>,
    pub pulls: Family<Outcome, Counter>,
    pub pull_bytes: Counter,
    pub pull_seconds: Histogram,
    pub oom_kills: Counter,
    pub cni_seconds: Family<Op, Histogram>,
    pub cni_failures: Family<Op, Counter>,
    pub shim_starts: Counter,
    pub shim_crashes: Counter,
    pub shim_recoveries: Counter,
    pub trace_spans_exported: Counter,
    pub trace_spans_failed: Counter,
    pub trace_spans_dropped: Counter,
}

fn seconds_histogram() -> Histogram {
    // 1 ms to about 65 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

impl Metrics {
    fn new() -> Metrics {
        Metrics {
            rpcs: Family::default(),
            rpc_seconds: Family::new_with_constructor(seconds_histogram),
            pulls: Family::default(),
            pull_bytes: Counter::default(),
            pull_seconds: Histogram::new(exponential_buckets(0.01, 2.0, 16)),
            oom_kills: Counter::default(),
            cni_seconds: Family::new_with_constructor(seconds_histogram),
            cni_failures: Family::default(),
            shim_starts: Counter::default(),
            shim_crashes: Counter::default(),
            shim_recoveries: Counter::default(),
            trace_spans_exported: Counter::default(),
            trace_spans_failed: Counter::default(),
            trace_spans_dropped: Counter::default(),
        }
    }

    /// Registers these in `r` (husk's prefix is the caller's).
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "grpc_requests",
            "CRI requests served, by method and gRPC code",
            self.rpcs.clone(),
        );
        r.register(
            "grpc_request_duration_seconds",
            "Time to serve a CRI request, by method",
            self.rpc_seconds.clone(),
        );
        r.register(
            "image_pulls",
            "Image pulls, by result (ok or the gRPC code of the failure)",
            self.pulls.clone(),
        );
        r.register(
            "image_pull_bytes",
            "Bytes of image layers downloaded",
            self.pull_bytes.clone(),
        );
        r.register(
            "image_pull_duration_seconds",
            "Time an image pull took",
            self.pull_seconds.clone(),
        );
        r.register(
            "container_oom_kills",
            "Containers that ended OOM-killed",
            self.oom_kills.clone(),
        );
        r.register(
            "cni_duration_seconds",
            "Time a pod's CNI ADD or DEL took, all plugins",
            self.cni_seconds.clone(),
        );
        r.register(
            "cni_failures",
            "CNI ADDs and DELs that failed",
            self.cni_failures.clone(),
        );
        r.register(
            "shim_starts",
            "Pod monitors (husk shim) started",
            self.shim_starts.clone(),
        );
        r.register(
            "shim_crashes",
            "Pod monitors found dead while their pod still had containers",
            self.shim_crashes.clone(),
        );
        r.register(
            "shim_recoveries",
            "Pod monitors started again to finish a dead one's work",
            self.shim_recoveries.clone(),
        );
        r.register(
            "trace_spans_exported",
            "Spans the OTLP collector accepted",
            self.trace_spans_exported.clone(),
        );
        r.register(
            "trace_spans_failed",
            "Spans whose export to the OTLP collector failed or timed out",
            self.trace_spans_failed.clone(),
        );
        r.register(
            "trace_spans_dropped",
            "Spans dropped because the export queue was full",
            self.trace_spans_dropped.clone(),
        );
    }
}

static METRICS: OnceLock<Metrics> = OnceLock::new();

/// The process's metrics.
pub fn get() -> &'static Metrics {
    METRICS.get_or_init(Metrics::new)
}

/// A gRPC code's canonical name, as grpc-go spells it (`codes.Code`'s
/// String) and so go-grpc-prometheus and the dashboards built on
/// containerd's metrics expect: `OK`, `Canceled`, not tonic's `Ok`,
/// `Cancelled`.
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "Canceled",
        Unknown => "Unknown",
        InvalidArgument => "InvalidArgument",
        DeadlineExceeded => "DeadlineExceeded",
        NotFound => "NotFound",
        AlreadyExists => "AlreadyExists",
        PermissionDenied => "PermissionDenied",
        ResourceExhausted => "ResourceExhausted",
        FailedPrecondition => "FailedPrecondition",
        Aborted => "Aborted",
        OutOfRange => "OutOfRange",
        Unimplemented => "Unimplemented",
        Internal => "Internal",
        Unavailable => "Unavailable",
        DataLoss => "DataLoss",
        Unauthenticated => "Unauthenticated",
    }
}

/// Counts one CRI request.
pub fn rpc(method: &str, code: tonic::Code, took: Duration) {
    let m = get();
    m.rpcs
        .get_or_create(&Rpc {
            method: method.to_string(),
            code: code_name(code).to_string(),
        })
        .inc();
    m.rpc_seconds
        .get_or_create(&Method {
            method: method.to_string(),
        })
        .observe(took.as_secs_f64());
}

/// Counts one image pull.
pub fn pull(result: Result<(), tonic::Code>, took: Duration) {
    let m = get();
    let result = match result {
        Ok(()) => "ok".to_string(),
        Err(c) => format!("{c:?}"),
    };
    m.pulls.get_or_create(&Outcome { result }).inc();
    m.pull_seconds.observe(took.as_secs_f64());
}

/// Counts one CNI ADD or DEL.
pub fn cni(op: &str, ok: bool, took: Duration) {
    let m = get();
    let op = Op { op: op.to_string() };
    m.cni_seconds.get_or_create(&op).observe(took.as_secs_f64());
    if !ok {
        m.cni_failures.get_or_create(&op).inc();
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn codes_carry_grpc_canonical_names() {
        use tonic::Code;
        let named = |c| super::code_name(c);
        assert_eq!(named(Code::Ok), "OK");
        assert_eq!(named(Code::Cancelled), "Canceled");
        assert_eq!(named(Code::NotFound), "NotFound");
        assert_eq!(named(Code::InvalidArgument), "InvalidArgument");
        assert_eq!(named(Code::DeadlineExceeded), "DeadlineExceeded");
        // Every code from 0 to 16 has its own name.
        let names: std::collections::HashSet<&str> =
            (0..=16).map(|i| named(Code::from_i32(i))).collect();
        assert_eq!(names.len(), 17);
    }
}
