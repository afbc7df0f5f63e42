//! The caller's deadline, answered as gRPC defines it (and an oversized
//! request, answered RESOURCE_EXHAUSTED).
//!
//! A client's deadline arrives as the `grpc-timeout` header. tonic's own
//! timer answers CANCELLED ("Timeout expired") when it passes; CRI callers
//! (critest, the kubelet's image puller) expect DEADLINE_EXCEEDED, as
//! grpc-go servers answer. This layer runs each call against the same
//! deadline, a millisecond early so that it always answers first, and drops
//! the handler's future when it passes (a pull stops downloading).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// Installs [`Deadline`] on every service of the server.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeadlineLayer;

impl<S> tower::Layer<S> for DeadlineLayer {
    type Service = Deadline<S>;
    fn layer(&self, inner: S) -> Deadline<S> {
        Deadline { inner }
    }
}

/// See the module documentation.
#[derive(Debug, Clone)]
pub struct Deadline<S> {
    inner: S,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B, RB> tower::Service<http::Request<B>> for Deadline<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
    RB: Default + Send + 'static,
{
    type Response = http::Response<RB>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let timeout = req
            .headers()
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .and_then(parse_timeout);
        let path = req.uri().path().to_string();
        let fut = self.inner.call(req);
        Box::pin(async move {
            let Some(t) = timeout else {
                return fut.await.map(oversized_is_exhausted);
            };
            let early = t.saturating_sub(Duration::from_millis(1));
            match tokio::time::timeout(early, fut).await {
                Ok(r) => r.map(oversized_is_exhausted),
                Err(_) => {
                    tracing::debug!(method = %path, timeout = ?t, "deadline exceeded");
                    Ok(tonic::Status::deadline_exceeded(format!(
                        "{path}: the caller's deadline of {t:?} passed"
                    ))
                    .into_http())
                }
            }
        })
    }
}

/// A request over the size limit is refused by tonic with OUT_OF_RANGE;
/// gRPC (and grpc-go, which the kubelet's peers are) says
/// RESOURCE_EXHAUSTED. Such refusals come before the handler, as a
/// trailers-only response, so the status is in the headers.
fn oversized_is_exhausted<RB>(mut resp: http::Response<RB>) -> http::Response<RB> {
    let h = resp.headers();
    let oversized = h.get("grpc-status").map(|v| v.as_bytes()) == Some(b"11")
        && h.get("grpc-message")
            .and_then(|v| v.to_str().ok())
            // grpc-message is percent-encoded.
            .is_some_and(|m| m.replace("%20", " ").contains("message length too large"));
    if oversized {
        resp.headers_mut()
            .insert("grpc-status", http::HeaderValue::from_static("8"));
    }
    resp
}

/// Parses a `grpc-timeout` value: up to 8 digits and a unit (H, M, S, m, u,
/// n).
pub fn parse_timeout(v: &str) -> Option<Duration> {
    if v.len() < 2 || v.len() > 9 {
        return None;
    }
    let (digits, unit) = v.split_at(v.len() - 1);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_grpc_timeouts() {
        assert_eq!(parse_timeout("1S"), Some(Duration::from_secs(1)));
        assert_eq!(parse_timeout("999u"), Some(Duration::from_micros(999)));
        assert_eq!(parse_timeout("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_timeout("5"), None);
        assert_eq!(parse_timeout("123456789S"), None);
        assert_eq!(parse_timeout("1x"), None);
    }

    #[tokio::test]
    async fn a_passed_deadline_answers_deadline_exceeded() {
        use tower::{Service as _, ServiceExt as _};
        let slow = tower::service_fn(|_req: http::Request<()>| async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
        });
        let mut svc = tower::Layer::layer(&DeadlineLayer, slow);
        let req = http::Request::builder()
            .uri("/runtime.v1.ImageService/PullImage")
            .header("grpc-timeout", "20m")
            .body(())
            .expect("request");
        let resp = svc
            .ready()
            .await
            .expect("ready")
            .call(req)
            .await
            .expect("infallible");
        assert_eq!(resp.headers()["grpc-status"], "4");
    }
}
