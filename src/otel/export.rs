//! The span queue: finished spans wait here, bounded, and one task sends
//! them to the collector in batches.
//!
//! A span that finds the queue full is dropped and counted
//! (`husk_trace_spans_dropped_total`), so an RPC ending its span never
//! waits on the collector. Each export has [`EXPORT_TIMEOUT`]; the
//! spans of one that fails or times out are counted
//! (`husk_trace_spans_failed_total`) and a warning says why, at most once
//! a minute. Shutting the queue down (a reload that changed the settings,
//! the end of the process) exports what it holds, then ends the task.

use opentelemetry::Context;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter as _, SpanProcessor};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// How long one export may take before its spans count as failed.
pub const EXPORT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Spans sent in one export at most.
const MAX_BATCH: usize = 512;
/// How long the first span of a batch waits for others.
const BATCH_DELAY: Duration = Duration::from_millis(500);
/// Warnings about failed exports, at most one per this.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// The span processor of `otel::install`: see the module documentation.
#[derive(Debug)]
pub struct Queue {
    tx: mpsc::Sender<SpanData>,
    stop: Mutex<Option<oneshot::Sender<()>>>,
}

impl Queue {
    /// A queue of `capacity` spans, exported through `exporter` by a task
    /// of the current tokio runtime (whose handle comes along: it ends
    /// after the queue's shutdown, once it exported what was left).
    pub fn start(
        exporter: opentelemetry_otlp::SpanExporter,
        capacity: usize,
    ) -> (Queue, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let (stop_tx, stop_rx) = oneshot::channel();
        let task = tokio::spawn(run(exporter, rx, stop_rx));
        let q = Queue {
            tx,
            stop: Mutex::new(Some(stop_tx)),
        };
        (q, task)
    }
}

impl SpanProcessor for Queue {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        if self.tx.try_send(span).is_err() {
            crate::metrics::get().trace_spans_dropped.inc();
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        // Batches leave within BATCH_DELAY on their own.
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        if let Some(stop) = self.stop.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = stop.send(());
        }
        Ok(())
    }
}

async fn run(
    exporter: opentelemetry_otlp::SpanExporter,
    mut rx: mpsc::Receiver<SpanData>,
    mut stop: oneshot::Receiver<()>,
) {
    let mut warned: Option<Instant> = None;
    loop {
        let mut batch = Vec::new();
        let stopping = tokio::select! {
            s = rx.recv() => match s {
                Some(s) => {
                    batch.push(s);
                    false
                }
                None => true,
            },
            _ = &mut stop => true,
        };
        if stopping {
            while let Ok(s) = rx.try_recv() {
                batch.push(s);
            }
            for chunk in batch.chunks(MAX_BATCH) {
                export(&exporter, chunk.to_vec(), &mut warned).await;
            }
            return;
        }
        let until = tokio::time::Instant::now() + BATCH_DELAY;
        while batch.len() < MAX_BATCH {
            match tokio::time::timeout_at(until, rx.recv()).await {
                Ok(Some(s)) => batch.push(s),
                _ => break,
            }
        }
        export(&exporter, batch, &mut warned).await;
    }
}

async fn export(
    exporter: &opentelemetry_otlp::SpanExporter,
    batch: Vec<SpanData>,
    warned: &mut Option<Instant>,
) {
    let n = batch.len() as u64;
    let why = match tokio::time::timeout(EXPORT_TIMEOUT, exporter.export(batch)).await {
        Ok(Ok(())) => {
            crate::metrics::get().trace_spans_exported.inc_by(n);
            return;
        }
        Ok(Err(e)) => e.to_string(),
        Err(_) => format!("no answer in {:?}", EXPORT_TIMEOUT),
    };
    crate::metrics::get().trace_spans_failed.inc_by(n);
    if warned.is_none_or(|t| t.elapsed() >= WARN_EVERY) {
        *warned = Some(Instant::now());
        tracing::warn!(spans = n, error = %why, "span export to the OTLP collector failed");
    }
}
