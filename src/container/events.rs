//! Container lifecycle events: where they are raised and how they reach
//! GetContainerEvents subscribers.
//!
//! The managers raise a [`Raw`] event through an [`Emitter`] at the point a
//! state change is recorded (for a container's own exit, while the record
//! map is locked, so a container's CREATED, STARTED, STOPPED and DELETED
//! always leave in that order). Raising never blocks: the queue to the
//! dispatcher is unbounded, and the dispatcher (in the server) only turns a
//! raw event into its CRI form and publishes it on a [`Hub`].
//!
//! The hub is a ring of `capacity` events shared by every subscriber; each
//! subscriber has its own cursor. One that keeps up receives every event, in
//! order; one that falls a whole ring behind is dropped (its stream ends with
//! an error) instead of holding the ring or the publisher back.

use crate::sandbox::manager::SandboxRecord;
use std::sync::Arc;
use tokio::sync::broadcast;

/// What happened to a container (or, with its own id, to a pod sandbox).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Created,
    Started,
    Stopped,
    Deleted,
}

/// An event as raised by a manager.
#[derive(Debug, Clone)]
pub struct Raw {
    pub kind: Kind,
    /// The container, or the sandbox itself for a sandbox event.
    pub container_id: String,
    pub sandbox_id: String,
    /// ns since the epoch, when the change was recorded.
    pub at: i64,
    /// The sandbox as it was, for an event raised just before its record
    /// goes away (a sandbox's DELETED).
    pub sandbox: Option<Box<SandboxRecord>>,
    /// The container's record as the event recorded it: its status in the
    /// event is this, not what the record has become by the time the
    /// event is dispatched (a CREATED dispatched after the start).
    pub container: Option<Box<super::record::ContainerRecord>>,
}

/// The managers' handle for raising events; cheap to clone.
#[derive(Clone)]
pub struct Emitter {
    tx: std::sync::mpsc::Sender<Raw>,
}

impl Emitter {
    /// Raises an event now; never blocks.
    pub fn emit(&self, kind: Kind, container_id: &str, sandbox_id: &str) {
        self.send(Raw {
            kind,
            container_id: container_id.to_string(),
            sandbox_id: sandbox_id.to_string(),
            at: crate::sys::now_ns(),
            sandbox: None,
            container: None,
        });
    }

    /// Raises a container's event with its record as it is now.
    pub fn emit_container(&self, kind: Kind, rec: &super::record::ContainerRecord) {
        self.send(Raw {
            kind,
            container_id: rec.id.clone(),
            sandbox_id: rec.sandbox_id.clone(),
            at: crate::sys::now_ns(),
            sandbox: None,
            container: Some(Box::new(rec.clone())),
        });
    }

    /// Raises a fully formed event.
    pub fn send(&self, raw: Raw) {
        tracing::debug!(container_id = %raw.container_id, pod_sandbox_id = %raw.sandbox_id, kind = ?raw.kind, "event");
        // A closed queue means the server is shutting down.
        let _ = self.tx.send(raw);
    }
}

/// A new event queue: the emitter for the managers, the receiver for the
/// dispatcher.
pub fn channel() -> (Emitter, std::sync::mpsc::Receiver<Raw>) {
    let (tx, rx) = std::sync::mpsc::channel();
    (Emitter { tx }, rx)
}

/// Fan-out of published events to any number of subscribers.
pub struct Hub<T> {
    tx: broadcast::Sender<Arc<T>>,
}

/// Why a subscription ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// The subscriber fell this many events behind and was dropped.
    Lagged(u64),
    /// The hub is gone (the server is stopping).
    Closed,
}

impl<T: Send + Sync + 'static> Hub<T> {
    /// A hub whose subscribers may each be up to `capacity` events behind.
    pub fn new(capacity: usize) -> Hub<T> {
        let (tx, _) = broadcast::channel(capacity.max(1));
        Hub { tx }
    }

    /// Sends `ev` to every current subscriber; never blocks.
    pub fn publish(&self, ev: T) {
        // No subscribers is not an error: the event simply has no audience.
        let _ = self.tx.send(Arc::new(ev));
    }

    /// A new subscriber, which sees events published from now on.
    pub fn subscribe(&self) -> Subscription<T> {
        Subscription {
            rx: self.tx.subscribe(),
        }
    }

    pub fn subscribers(&self) -> usize {
        self.tx.receiver_count()
    }
}

/// One subscriber's cursor.
pub struct Subscription<T> {
    rx: broadcast::Receiver<Arc<T>>,
}

impl<T: Clone + Send + Sync + 'static> Subscription<T> {
    /// The next event, or why the subscription ended.
    pub async fn next(&mut self) -> Result<T, Ended> {
        match self.rx.recv().await {
            Ok(ev) => Ok((*ev).clone()),
            Err(broadcast::error::RecvError::Lagged(n)) => Err(Ended::Lagged(n)),
            Err(broadcast::error::RecvError::Closed) => Err(Ended::Closed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn subscribers_that_keep_up_get_everything_in_order() {
        let hub: Hub<u32> = Hub::new(8);
        let mut a = hub.subscribe();
        let mut b = hub.subscribe();
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            for _ in 0..1000 {
                got.push(a.next().await.expect("event"));
            }
            got
        });
        for i in 0..1000u32 {
            hub.publish(i);
            // Stay within the ring for `b`, which reads in step.
            assert_eq!(b.next().await, Ok(i));
            if i % 4 == 0 {
                tokio::task::yield_now().await;
            }
        }
        let got = reader.await.expect("reader");
        assert_eq!(got, (0..1000).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn a_slow_subscriber_is_dropped_without_stalling_the_publisher() {
        let hub: Hub<u32> = Hub::new(4);
        let mut slow = hub.subscribe();
        let mut fast = hub.subscribe();
        for i in 0..10u32 {
            hub.publish(i);
            assert_eq!(fast.next().await, Ok(i));
        }
        assert_eq!(slow.next().await, Err(Ended::Lagged(6)));
        drop(hub);
        assert_eq!(fast.next().await, Err(Ended::Closed));
    }

    #[test]
    fn emitting_never_blocks_and_keeps_order() {
        let (e, rx) = channel();
        for i in 0..10_000 {
            e.emit(Kind::Created, &format!("c{i}"), "s");
        }
        let ids: Vec<String> = rx.try_iter().map(|r| r.container_id).collect();
        assert_eq!(ids.len(), 10_000);
        assert_eq!(ids[9_999], "c9999");
    }
}
