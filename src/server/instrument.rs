//! Shared server state, the readiness gate, and per-RPC instrumentation.
//!
//! Until recovery has opened every manager, `State::images()` (and its
//! siblings as they arrive) answer Unavailable, so no RPC acts on state that
//! has not been reconciled. `observe` logs each RPC's outcome: mutations at
//! info, reads at debug, failures at warn with their gRPC code; a mutation
//! that succeeded is also kept in the timing table (`crate::timing`), and
//! each call is a span when tracing is on (`crate::otel`).

use super::status::Error;
use crate::config::Config;
use crate::image::ImageManager;
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Instant;
use tonic::Status;

/// What every service shares.
pub struct State {
    pub cfg: Config,
    /// The runtime handlers of `cfg` (then of each reload's).
    pub handlers: Arc<crate::sandbox::handlers::Live>,
    /// The pause image (then each reload's).
    pub sandbox_image: Arc<std::sync::RwLock<String>>,
    images: OnceLock<Arc<ImageManager>>,
    sandboxes: OnceLock<Arc<crate::sandbox::SandboxManager>>,
    containers: OnceLock<Arc<crate::container::manager::ContainerManager>>,
    events: OnceLock<Arc<EventHub>>,
    streaming: OnceLock<Arc<crate::streaming::Server>>,
}

/// Where GetContainerEvents subscribers read from.
pub type EventHub = crate::container::events::Hub<crate::api::cri::ContainerEventResponse>;

impl State {
    pub fn new(cfg: Config) -> State {
        let systemd = crate::cgroup::Driver::current() == crate::cgroup::Driver::Systemd;
        State {
            handlers: Arc::new(crate::sandbox::handlers::Live::new(
                crate::sandbox::handlers::Handlers::new(&cfg, systemd),
            )),
            sandbox_image: Arc::new(std::sync::RwLock::new(cfg.sandbox_image.clone())),
            cfg,
            images: OnceLock::new(),
            sandboxes: OnceLock::new(),
            containers: OnceLock::new(),
            events: OnceLock::new(),
            streaming: OnceLock::new(),
        }
    }

    pub fn set_images(&self, m: Arc<ImageManager>) {
        let _ = self.images.set(m);
    }

    /// The image store, or Unavailable while recovering.
    pub fn images(&self) -> Result<Arc<ImageManager>, Status> {
        self.images
            .get()
            .cloned()
            .ok_or_else(|| Error::Recovering.into())
    }

    pub fn set_containers(&self, m: Arc<crate::container::manager::ContainerManager>) {
        let _ = self.containers.set(m);
    }

    /// The container manager, or Unavailable while recovering.
    pub fn containers(&self) -> Result<Arc<crate::container::manager::ContainerManager>, Status> {
        self.containers
            .get()
            .cloned()
            .ok_or_else(|| Error::Recovering.into())
    }

    pub fn set_events(&self, h: Arc<EventHub>) {
        let _ = self.events.set(h);
    }

    /// The container events hub, or Unavailable while recovering.
    pub fn events(&self) -> Result<Arc<EventHub>, Status> {
        self.events
            .get()
            .cloned()
            .ok_or_else(|| Error::Recovering.into())
    }

    pub fn set_streaming(&self, s: Arc<crate::streaming::Server>) {
        let _ = self.streaming.set(s);
    }

    /// The streaming server (started with `husk serve`).
    pub fn streaming(&self) -> Result<Arc<crate::streaming::Server>, Status> {
        self.streaming
            .get()
            .cloned()
            .ok_or_else(|| Status::unavailable("the streaming server is not running"))
    }

    pub fn set_sandboxes(&self, m: Arc<crate::sandbox::SandboxManager>) {
        let _ = self.sandboxes.set(m);
    }

    /// The sandbox manager, or Unavailable while recovering.
    pub fn sandboxes(&self) -> Result<Arc<crate::sandbox::SandboxManager>, Status> {
        self.sandboxes
            .get()
            .cloned()
            .ok_or_else(|| Error::Recovering.into())
    }
}

/// Whether an RPC changes state (logged at info) or only reads (debug).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Read,
    Mutate,
}

/// Runs one RPC handler inside a span and logs how it ended.
pub async fn observe<T, F>(
    method: &'static str,
    op: Op,
    fut: F,
) -> Result<tonic::Response<T>, Status>
where
    F: Future<Output = Result<T, Status>>,
{
    let span = tracing::info_span!("cri", method);
    let _entered = span.clone();
    let _in_flight = super::idle::enter();
    let start = Instant::now();
    let fut = tracing::Instrument::instrument(fut, span);
    let r = match crate::otel::rpc(method) {
        None => fut.await,
        Some(cx) => {
            let r = opentelemetry::trace::FutureExt::with_context(fut, cx.clone()).await;
            match &r {
                Ok(_) => crate::otel::rpc_end(&cx, tonic::Code::Ok, ""),
                Err(s) => crate::otel::rpc_end(&cx, s.code(), s.message()),
            }
            r
        }
    };
    let took = start.elapsed();
    crate::metrics::rpc(
        method,
        r.as_ref()
            .map(|_| tonic::Code::Ok)
            .unwrap_or_else(|s| s.code()),
        took,
    );
    let ms = took.as_secs_f64() * 1e3;
    if op == Op::Mutate && r.is_ok() {
        crate::timing::keep(method, crate::timing::RPC, crate::timing::Kind::Own, took);
    }
    match &r {
        Ok(_) if op == Op::Mutate => tracing::info!(method, ms, "rpc ok"),
        Ok(_) => tracing::debug!(method, ms, "rpc ok"),
        Err(s) => tracing::warn!(method, ms, code = ?s.code(), message = s.message(), "rpc failed"),
    }
    r.map(tonic::Response::new)
}
