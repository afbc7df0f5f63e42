//! W3C trace context in and out: the caller's `traceparent` (and
//! `tracestate`) on each gRPC request becomes the parent of husk's span of
//! the call; a traced shim call carries a `traceparent` to the shim.
//!
//! [`TraceLayer`] wraps every service of the CRI socket. While tracing is
//! on it reads the headers and polls the call with that context in force,
//! together with the call's path ([`RpcPath`]); `otel::rpc` then starts
//! the call's span under it. While tracing is off it passes calls through.

use opentelemetry::propagation::{Extractor, TextMapPropagator as _};
use opentelemetry::trace::FutureExt as _;
use opentelemetry::Context;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

/// The gRPC path of the call being served, `/package.Service/Method`.
#[derive(Debug, Clone)]
pub struct RpcPath(pub String);

impl RpcPath {
    /// `package.Service`.
    pub fn service(&self) -> String {
        let p = self.0.trim_start_matches('/');
        p.split_once('/').map_or(p, |(s, _)| s).to_string()
    }
}

struct Headers<'a>(&'a http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }
    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

/// The context a request's headers name (none: an empty one), and its path.
pub fn extract(headers: &http::HeaderMap, path: &str) -> Context {
    TraceContextPropagator::new()
        .extract_with_context(&Context::new(), &Headers(headers))
        .with_value(RpcPath(path.to_string()))
}

/// The `traceparent` of `cx`'s span.
pub fn traceparent(cx: &Context) -> String {
    let mut out = std::collections::HashMap::new();
    TraceContextPropagator::new().inject_context(cx, &mut out);
    out.remove("traceparent").unwrap_or_default()
}

/// Installs [`Trace`] on every service of the server.
#[derive(Debug, Clone, Copy, Default)]
pub struct TraceLayer;

impl<S> tower::Layer<S> for TraceLayer {
    type Service = Trace<S>;
    fn layer(&self, inner: S) -> Trace<S> {
        Trace { inner }
    }
}

/// See the module documentation.
#[derive(Debug, Clone)]
pub struct Trace<S> {
    inner: S,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B> tower::Service<http::Request<B>> for Trace<S>
where
    S: tower::Service<http::Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if !super::enabled() {
            return Box::pin(self.inner.call(req));
        }
        let cx = extract(req.headers(), req.uri().path());
        Box::pin(self.inner.call(req).with_context(cx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::TraceContextExt as _;

    #[test]
    fn a_traceparent_round_trips() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let mut h = http::HeaderMap::new();
        h.insert("traceparent", http::HeaderValue::from_static(tp));
        let cx = extract(&h, "/runtime.v1.RuntimeService/RunPodSandbox");
        let sc = cx.span().span_context().clone();
        assert!(sc.is_remote() && sc.is_sampled());
        assert_eq!(
            sc.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(traceparent(&cx), tp);
        let path = cx.get::<RpcPath>().map(RpcPath::service);
        assert_eq!(path.as_deref(), Some("runtime.v1.RuntimeService"));
    }

    #[test]
    fn a_bad_traceparent_is_no_parent() {
        let mut h = http::HeaderMap::new();
        h.insert("traceparent", http::HeaderValue::from_static("00-zz-1-01"));
        let cx = extract(&h, "/p.S/M");
        assert!(!cx.span().span_context().is_valid());
        assert_eq!(traceparent(&cx), "");
    }
}
