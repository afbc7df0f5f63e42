//! GetContainerEvents: a server stream of CREATED, STARTED, STOPPED and
//! DELETED events for containers and pod sandboxes (a sandbox's events
//! carry its own id as the container id, as containerd sends them).
//!
//! The dispatcher (one OS thread, started once recovery is done) turns each
//! raw event from the managers into its CRI form — the pod's status and
//! the statuses of its containers, from the records as they are when the
//! event is dispatched (the event's own container as it was when the
//! event was raised), without shim calls — and publishes it on the hub
//! (`events.rs`), which each subscriber reads at its own pace. A subscriber
//! that falls `CAPACITY` events behind gets ResourceExhausted and its
//! stream ends; the others, and the managers, never wait for it.

use super::container_status::status_of as container_status;
use super::sandbox_status::status_of as sandbox_status;
use crate::api::cri::*;
use crate::container::events::{Ended, Hub, Kind, Raw};
use crate::server::instrument::State;
use std::sync::Arc;
use tonic::Status;

/// How far one subscriber may fall behind before it is dropped.
pub const CAPACITY: usize = 4096;

fn kind_of(k: Kind) -> ContainerEventType {
    match k {
        Kind::Created => ContainerEventType::ContainerCreatedEvent,
        Kind::Started => ContainerEventType::ContainerStartedEvent,
        Kind::Stopped => ContainerEventType::ContainerStoppedEvent,
        Kind::Deleted => ContainerEventType::ContainerDeletedEvent,
    }
}

/// The CRI form of a raw event.
fn build(state: &State, raw: Raw) -> ContainerEventResponse {
    let sandbox = raw
        .sandbox
        .map(|b| *b)
        .or_else(|| state.sandboxes().ok().and_then(|s| s.get(&raw.sandbox_id)));
    let containers_statuses = match state.containers() {
        Ok(m) => {
            let mut recs: Vec<_> = m
                .of_sandbox(&raw.sandbox_id)
                .into_iter()
                .filter_map(|id| m.get(&id))
                .collect();
            // The event's own container as the event recorded it.
            if let Some(own) = raw.container {
                if let Some(r) = recs.iter_mut().find(|r| r.id == own.id) {
                    *r = *own;
                }
            }
            recs.sort_by_key(|r| r.created_at);
            recs.iter()
                .map(|r| container_status(r, m.saved_config(&r.id).as_ref()))
                .collect()
        }
        Err(_) => Vec::new(),
    };
    ContainerEventResponse {
        container_id: raw.container_id,
        container_event_type: kind_of(raw.kind) as i32,
        created_at: raw.at,
        pod_sandbox_status: sandbox.as_ref().map(sandbox_status),
        containers_statuses,
    }
}

/// Starts the dispatcher; returns the hub subscribers read from.
pub fn start(
    state: Arc<State>,
    raw: std::sync::mpsc::Receiver<Raw>,
) -> std::io::Result<Arc<Hub<ContainerEventResponse>>> {
    let hub = Arc::new(Hub::new(CAPACITY));
    let out = hub.clone();
    std::thread::Builder::new()
        .name("husk-events".into())
        .spawn(move || {
            for r in raw {
                out.publish(build(&state, r));
            }
        })?;
    Ok(hub)
}

pub type EventStream = std::pin::Pin<
    Box<dyn tokio_stream::Stream<Item = Result<ContainerEventResponse, Status>> + Send + 'static>,
>;

pub async fn handle(state: &State, _req: GetEventsRequest) -> Result<EventStream, Status> {
    let sub = state.events()?.subscribe();
    tracing::debug!("event subscriber joined");
    // Dropping the stream (the client went away) drops the subscription.
    let stream = futures::stream::unfold(Some(sub), |sub| async move {
        let mut sub = sub?;
        match sub.next().await {
            Ok(ev) => Some((Ok(ev), Some(sub))),
            Err(Ended::Lagged(n)) => {
                tracing::warn!(missed = n, "dropping a slow event subscriber");
                Some((
                    Err(Status::resource_exhausted(format!(
                        "subscriber fell {n} events behind (more than {CAPACITY}) and was dropped; subscribe again and relist"
                    ))),
                    None,
                ))
            }
            Err(Ended::Closed) => None,
        }
    });
    Ok(Box::pin(stream))
}
