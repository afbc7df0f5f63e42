//! The shim's part of a trace. A request that carries a `traceparent` is
//! timed here: its handling as a whole, and inside it each runtime call
//! ([`record`]). The spans go back in the answer (`ShimResponse.spans`)
//! and the server exports them under its span of the call; the shim itself
//! never talks to a collector. The shim serves one request at a time, so
//! the spans of the one being served are kept in a thread-local.

use crate::api::shim::{shim_request::Request, ShimRequest, ShimResponse, ShimSpan};
use std::cell::RefCell;
use std::time::{Duration, SystemTime};

/// Spans one answer carries at most.
pub const MAX_SPANS: usize = 32;

thread_local! {
    static SPANS: RefCell<Option<Vec<ShimSpan>>> = const { RefCell::new(None) };
}

/// The name of a request's kind.
pub fn request_name(req: &ShimRequest) -> &'static str {
    match &req.request {
        Some(Request::Create(_)) => "Create",
        Some(Request::Start(_)) => "Start",
        Some(Request::Kill(_)) => "Kill",
        Some(Request::Delete(_)) => "Delete",
        Some(Request::State(_)) => "State",
        Some(Request::Shutdown(_)) => "Shutdown",
        Some(Request::ReopenLog(_)) => "ReopenLog",
        Some(Request::Exec(_)) => "Exec",
        Some(Request::StreamExec(_)) => "StreamExec",
        Some(Request::Attach(_)) => "Attach",
        Some(Request::Update(_)) => "Update",
        Some(Request::Stats(_)) => "Stats",
        Some(Request::Resize(_)) => "Resize",
        Some(Request::CloseStdin(_)) => "CloseStdin",
        None => "Empty",
    }
}

fn unix_nanos(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// A traced request being served.
pub(super) struct Traced {
    name: &'static str,
    start: SystemTime,
}

/// Starts timing `req` if its caller traces it.
pub(super) fn begin(req: &ShimRequest) -> Option<Traced> {
    if req.traceparent.is_empty() {
        return None;
    }
    tracing::debug!(traceparent = %req.traceparent, request = request_name(req), "traced request");
    SPANS.with(|s| *s.borrow_mut() = Some(Vec::new()));
    Some(Traced {
        name: request_name(req),
        start: SystemTime::now(),
    })
}

/// Whether the request being served is traced.
pub(super) fn active() -> bool {
    SPANS.with(|s| s.borrow().is_some())
}

/// Records a stage of the traced request that just ended after `took`;
/// `runtime` names what ran it (libcontainer, or an OCI runtime's path).
pub(super) fn record(name: &str, runtime: impl FnOnce() -> String, took: Duration) {
    if !active() {
        return;
    }
    let end = SystemTime::now();
    let span = ShimSpan {
        name: name.to_string(),
        start_unix_nano: unix_nanos(end - took),
        end_unix_nano: unix_nanos(end),
        parent: 0,
        attributes: [("husk.runtime".to_string(), runtime())].into(),
    };
    SPANS.with(|s| {
        if let Some(v) = s.borrow_mut().as_mut() {
            if v.len() + 1 < MAX_SPANS {
                v.push(span);
            }
        }
    });
}

/// Ends the traced request: its spans, its own first, go in `resp`.
pub(super) fn finish(t: Traced, resp: &mut ShimResponse) {
    let inner = SPANS.with(|s| s.borrow_mut().take()).unwrap_or_default();
    let mut attributes = std::collections::HashMap::from([(
        "process.pid".to_string(),
        std::process::id().to_string(),
    )]);
    if !resp.error.is_empty() {
        attributes.insert("error".to_string(), resp.error.clone());
    }
    resp.spans.push(ShimSpan {
        name: format!("husk-shim {}", t.name),
        start_unix_nano: unix_nanos(t.start),
        end_unix_nano: unix_nanos(SystemTime::now()),
        parent: -1,
        attributes,
    });
    resp.spans.extend(inner);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::shim::StartRequest;

    #[test]
    fn a_traced_request_returns_its_spans_and_an_untraced_one_none() {
        let mut req = ShimRequest {
            request: Some(Request::Start(StartRequest { id: "c".into() })),
            ..Default::default()
        };
        assert!(begin(&req).is_none());
        record("runtime start", || unreachable!(), Duration::from_millis(1));
        assert!(!active());
        req.traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into();
        let t = begin(&req).expect("traced");
        // A stage of 3 ms that ended after 4 ms of the request.
        std::thread::sleep(Duration::from_millis(4));
        record(
            "runtime start",
            || "libcontainer".into(),
            Duration::from_millis(3),
        );
        let mut resp = ShimResponse::default();
        finish(t, &mut resp);
        assert!(!active());
        let names: Vec<&str> = resp.spans.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["husk-shim Start", "runtime start"]);
        assert_eq!((resp.spans[0].parent, resp.spans[1].parent), (-1, 0));
        let s = &resp.spans[1];
        assert_eq!(s.end_unix_nano - s.start_unix_nano, 3_000_000);
        assert!(s.start_unix_nano >= resp.spans[0].start_unix_nano);
        assert!(s.end_unix_nano <= resp.spans[0].end_unix_nano);
    }
}
