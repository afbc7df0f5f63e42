//! A traced call to a pod's shim: a client span around the call, the
//! caller's context sent along as a `traceparent`, and the spans the shim
//! returns (`traced.rs`) exported under the client span.

use crate::api::shim::{ShimRequest, ShimResponse, ShimSpan};
use opentelemetry::trace::{SpanKind, TraceContextExt as _};
use opentelemetry::{Context, KeyValue};
use std::time::{Duration, SystemTime};

/// A shim call being traced.
pub struct Call {
    cx: Context,
}

/// Starts the span of a call of `req` to the shim of `dir`, when the
/// context in force is traced; the request to send (with its
/// `traceparent`) comes back in `req`'s place.
pub fn begin(req: &ShimRequest, dir: &std::path::Path) -> Option<(Call, ShimRequest)> {
    let parent = crate::otel::current()?;
    let name = format!("shim {}", super::traced::request_name(req));
    let pod = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let cx = crate::otel::child(
        &parent,
        name,
        SpanKind::Client,
        SystemTime::now(),
        vec![KeyValue::new("husk.shim.dir", pod)],
    )?;
    let mut traced = req.clone();
    traced.traceparent = crate::otel::propagate::traceparent(&cx);
    Some((Call { cx }, traced))
}

fn time(unix_nano: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_nanos(unix_nano.max(0) as u64)
}

/// Ends the call's span: the shim's spans under it, its failure if any.
pub fn end(call: Call, resp: &std::io::Result<ShimResponse>) {
    let span = call.cx.span();
    match resp {
        Ok(r) => {
            import(&call.cx, &r.spans);
            if !r.error.is_empty() {
                span.set_status(opentelemetry::trace::Status::error(r.error.clone()));
            }
        }
        Err(e) => span.set_status(opentelemetry::trace::Status::error(e.to_string())),
    }
    span.end();
}

/// The shim's spans as children of `parent` (a span whose parent index is
/// not an earlier span's goes directly under `parent`).
fn import(parent: &Context, spans: &[ShimSpan]) {
    let mut made: Vec<Context> = Vec::new();
    for s in spans.iter().take(super::traced::MAX_SPANS) {
        let under = usize::try_from(s.parent)
            .ok()
            .and_then(|i| made.get(i))
            .unwrap_or(parent);
        let mut attributes: Vec<KeyValue> = s
            .attributes
            .iter()
            .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
            .collect();
        attributes.sort_by(|a, b| a.key.as_str().cmp(b.key.as_str()));
        let kind = if s.parent < 0 {
            SpanKind::Server
        } else {
            SpanKind::Internal
        };
        match crate::otel::child(
            under,
            s.name.clone(),
            kind,
            time(s.start_unix_nano),
            attributes,
        ) {
            Some(cx) => made.push(cx),
            None => return,
        }
    }
    // Children end before their parents.
    for (cx, s) in made.iter().zip(spans).rev() {
        cx.span().end_with_timestamp(time(s.end_unix_nano));
    }
}
