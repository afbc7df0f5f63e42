//! OpenTelemetry traces over OTLP/gRPC, off unless `[tracing] endpoint` is
//! set.
//!
//! Each CRI call gets a server span (`rpc`, from `server::instrument`),
//! whose parent is the caller's W3C `traceparent` when it sent one
//! (`propagate.rs`). Inside it: a span per stage husk times
//! (`crate::timing::Stages`: image, namespaces, CNI ADD and its plugins,
//! shim, create, start …), a client span per shim call, and under that the
//! shim's own work, which the shim times and returns in its answer
//! (`shim/spans.rs`). Sampling is parent-based: a sampled caller's trace is
//! kept, an unsampled one's never, and a trace that starts here is kept at
//! `sampling_ratio`.
//!
//! Finished spans go to a bounded queue that a background task exports
//! (`export.rs`): a slow or unreachable collector costs dropped spans,
//! counted in `husk_trace_spans_dropped_total`, never an RPC's time.
//!
//! The OpenTelemetry context lives in a thread: work moved to another
//! thread takes it along through [`spawn_blocking`] or [`carry`].

pub mod export;
pub mod propagate;

use crate::config::TracingConfig;
use opentelemetry::trace::{SpanKind, TraceContextExt, Tracer as _, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::RwLock;
use std::time::SystemTime;

struct Installed {
    settings: TracingConfig,
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    task: tokio::task::JoinHandle<()>,
}

static CURRENT: RwLock<Option<Installed>> = RwLock::new(None);
static ON: AtomicBool = AtomicBool::new(false);

/// Whether spans are being made.
pub fn enabled() -> bool {
    ON.load(Ordering::Relaxed)
}

fn tracer() -> Option<SdkTracer> {
    if !enabled() {
        return None;
    }
    CURRENT
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .map(|i| i.tracer.clone())
}

/// Puts `cfg` in force (at the start, and at each reload): a new exporter
/// and queue when it changed, none when tracing is now off. The previous
/// queue exports what it holds, then stops. Runs inside the tokio runtime.
pub fn apply(cfg: &TracingConfig) -> Result<(), String> {
    let mut cur = CURRENT.write().unwrap_or_else(|p| p.into_inner());
    if cur.as_ref().map(|i| &i.settings) == Some(cfg) {
        return Ok(());
    }
    let next = match cfg.uri().map_err(|e| e.0)? {
        None => None,
        Some(uri) => Some(install(cfg, &uri)?),
    };
    ON.store(next.is_some(), Ordering::Relaxed);
    if let Some(old) = std::mem::replace(&mut *cur, next) {
        // The queue's shutdown only tells its task to export what is left.
        let _ = old.provider.shutdown();
    }
    match cur.as_ref() {
        Some(i) => {
            tracing::info!(endpoint = %i.settings.endpoint, sampling_ratio = i.settings.sampling_ratio, "tracing to an OTLP collector")
        }
        None => tracing::debug!("tracing off"),
    }
    Ok(())
}

fn install(cfg: &TracingConfig, uri: &http::Uri) -> Result<Installed, String> {
    use opentelemetry_otlp::{WithExportConfig as _, WithTonicConfig as _};
    let resource = Resource::builder_empty()
        .with_attributes([
            KeyValue::new("service.name", "husk"),
            KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
            KeyValue::new(
                "host.name",
                rustix::system::uname()
                    .nodename()
                    .to_string_lossy()
                    .into_owned(),
            ),
            KeyValue::new("process.pid", i64::from(std::process::id())),
        ])
        .build();
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_timeout(export::EXPORT_TIMEOUT)
        .with_channel(
            tonic::transport::Channel::from_shared(format!("{uri}"))
                .map_err(|e| format!("tracing.endpoint: {e}"))?
                .connect_timeout(export::EXPORT_TIMEOUT)
                .timeout(export::EXPORT_TIMEOUT)
                .connect_lazy(),
        )
        .build()
        .map_err(|e| format!("tracing.endpoint: {e}"))?;
    opentelemetry_sdk::trace::SpanExporter::set_resource(&mut exporter, &resource);
    let (queue, task) = export::Queue::start(exporter, cfg.queue_size);
    let provider = SdkTracerProvider::builder()
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            cfg.sampling_ratio,
        ))))
        .with_span_processor(queue)
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("husk");
    Ok(Installed {
        settings: cfg.clone(),
        provider,
        tracer,
        task,
    })
}

/// Stops tracing at the end of the process: the spans still queued are
/// exported (for [`export::EXPORT_TIMEOUT`] at most).
pub async fn stop() {
    let old = CURRENT.write().unwrap_or_else(|p| p.into_inner()).take();
    ON.store(false, Ordering::Relaxed);
    if let Some(i) = old {
        let _ = i.provider.shutdown();
        let _ = tokio::time::timeout(export::EXPORT_TIMEOUT, i.task).await;
    }
}

/// The context of the span now in force, if tracing is on and it records.
pub fn current() -> Option<Context> {
    if !enabled() {
        return None;
    }
    let cx = Context::current();
    cx.span().is_recording().then_some(cx)
}

/// The server span of one CRI call, a child of the caller's context (put
/// in force by `propagate.rs`); `None` when tracing is off.
pub fn rpc(method: &'static str) -> Option<Context> {
    let tracer = tracer()?;
    let parent = Context::current();
    let (service, name) = match parent.get::<propagate::RpcPath>() {
        Some(p) => (p.service(), p.0.trim_start_matches('/').to_string()),
        None => (String::new(), method.to_string()),
    };
    let span = tracer
        .span_builder(name)
        .with_kind(SpanKind::Server)
        .with_attributes([
            KeyValue::new("rpc.system", "grpc"),
            KeyValue::new("rpc.service", service),
            KeyValue::new("rpc.method", method),
        ])
        .start_with_context(&tracer, &parent);
    Some(parent.with_span(span))
}

/// Ends a call's span with its gRPC outcome.
pub fn rpc_end(cx: &Context, code: tonic::Code, message: &str) {
    let span = cx.span();
    span.set_attribute(KeyValue::new("rpc.grpc.status_code", code as i64));
    if code != tonic::Code::Ok {
        span.set_status(opentelemetry::trace::Status::error(message.to_string()));
    }
    span.end();
}

/// A span `name` under `parent` that began at `start`; end it yourself
/// (or it ends when its context is dropped).
pub fn child(
    parent: &Context,
    name: impl Into<String>,
    kind: SpanKind,
    start: SystemTime,
    attributes: Vec<KeyValue>,
) -> Option<Context> {
    let tracer = tracer()?;
    let span = tracer
        .span_builder(name.into())
        .with_kind(kind)
        .with_start_time(start)
        .with_attributes(attributes)
        .start_with_context(&tracer, parent);
    Some(parent.with_span(span))
}

/// A finished span `name` under `parent`, from `start` to `end`.
pub fn finished(
    parent: &Context,
    name: impl Into<String>,
    start: SystemTime,
    end: SystemTime,
    attributes: Vec<KeyValue>,
) {
    if let Some(cx) = child(parent, name, SpanKind::Internal, start, attributes) {
        cx.span().end_with_timestamp(end);
    }
}

/// `f` with the context now in force, wherever it runs.
pub fn carry<T>(f: impl FnOnce() -> T) -> impl FnOnce() -> T {
    let cx = current();
    move || {
        let _in = cx.map(Context::attach);
        f()
    }
}

/// `tokio::spawn`, the context now in force carried along: for work that
/// must run to its end even if the caller that started it goes (a create
/// whose name is reserved: made, or unwound and its name released).
pub fn spawn<F>(f: F) -> tokio::task::JoinHandle<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    use opentelemetry::context::FutureExt;
    use tracing::Instrument;
    let f = f.in_current_span();
    match current() {
        Some(cx) => tokio::spawn(f.with_context(cx)),
        None => tokio::spawn(f),
    }
}

/// `tokio::task::spawn_blocking`, the context now in force carried along.
pub fn spawn_blocking<T, F>(f: F) -> tokio::task::JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(carry(f))
}
