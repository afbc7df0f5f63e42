//! An OTLP/gRPC trace receiver for the tests: the OpenTelemetry
//! collector's TraceService on a free 127.0.0.1 port, keeping every span
//! it is sent, with the resource it came with.

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue};
use opentelemetry_proto::tonic::trace::v1::Span;
use std::sync::{Arc, Mutex};

/// One received span and its resource's attributes.
#[derive(Debug, Clone)]
pub struct Received {
    pub span: Span,
    pub resource: Vec<KeyValue>,
}

impl Received {
    pub fn trace_id(&self) -> String {
        hex::encode(&self.span.trace_id)
    }
    pub fn span_id(&self) -> String {
        hex::encode(&self.span.span_id)
    }
    pub fn parent_id(&self) -> String {
        hex::encode(&self.span.parent_span_id)
    }
    /// The string (or number, as text) of attribute `key`.
    pub fn attr(&self, key: &str) -> Option<String> {
        attr(&self.span.attributes, key)
    }
    pub fn resource_attr(&self, key: &str) -> Option<String> {
        attr(&self.resource, key)
    }
}

fn attr(kvs: &[KeyValue], key: &str) -> Option<String> {
    let v = kvs
        .iter()
        .find(|kv| kv.key == key)?
        .value
        .as_ref()?
        .value
        .as_ref()?;
    Some(match v {
        any_value::Value::StringValue(s) => s.clone(),
        any_value::Value::IntValue(i) => i.to_string(),
        any_value::Value::BoolValue(b) => b.to_string(),
        any_value::Value::DoubleValue(d) => d.to_string(),
        other => format!("{other:?}"),
    })
}

#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<Received>>>);

#[tonic::async_trait]
impl TraceService for Sink {
    async fn export(
        &self,
        r: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut kept = self.0.lock().unwrap();
        for rs in r.into_inner().resource_spans {
            let resource = rs.resource.map(|r| r.attributes).unwrap_or_default();
            for ss in rs.scope_spans {
                for span in ss.spans {
                    kept.push(Received {
                        span,
                        resource: resource.clone(),
                    });
                }
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

/// The receiver; it stops when dropped.
pub struct Receiver {
    pub port: u16,
    sink: Sink,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Receiver {
    pub async fn start() -> Receiver {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let sink = Sink::default();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let svc = TraceServiceServer::new(sink.clone());
        tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming_shutdown(
                    tokio_stream::wrappers::TcpListenerStream::new(l),
                    async {
                        let _ = rx.await;
                    },
                )
                .await;
        });
        Receiver {
            port,
            sink,
            _stop: tx,
        }
    }

    /// The endpoint for husk's `[tracing] endpoint`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Received> {
        self.sink.0.lock().unwrap().clone()
    }

    /// The spans of trace `trace_id`, once `done` says they are all there
    /// (or after `secs`, whatever came).
    pub async fn trace(
        &self,
        trace_id: &str,
        secs: u64,
        done: impl Fn(&[Received]) -> bool,
    ) -> Vec<Received> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        loop {
            let got: Vec<Received> = self
                .spans()
                .into_iter()
                .filter(|s| s.trace_id() == trace_id)
                .collect();
            if done(&got) || std::time::Instant::now() >= deadline {
                return got;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
}
