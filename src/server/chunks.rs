//! The `Stream*` list RPCs' transport (KEP-5825): the items of a list
//! sent as a server stream of responses, each of at least one item, for
//! nodes whose lists outgrow one gRPC message.
//!
//! Invariants:
//! - Items are made one at a time by an iterator on a blocking thread and
//!   sent in chunks of at most [`MAX_ITEMS`] items and [`MAX_BYTES`]
//!   encoded bytes (a single larger item goes alone). The channel holds one
//!   chunk, so a stream holds at most three chunks (one being filled, one
//!   queued, one being written) whatever the length of the list.
//! - Every item is sent once; an empty list is a stream that ends at once.
//! - A client that cancels or goes away drops the receiver: the producer's
//!   next send fails and it stops, so nothing keeps running for it.

use futures::Stream;
use std::pin::Pin;
use tonic::Status;

/// A server stream of list responses.
pub type ListStream<R> = Pin<Box<dyn Stream<Item = Result<R, Status>> + Send>>;

/// The most items in one response.
pub const MAX_ITEMS: usize = 500;

/// The most encoded bytes in one response: a quarter of gRPC's default
/// 4 MiB message limit, which every client has.
pub const MAX_BYTES: usize = 1 << 20;

/// Streams the items `make` yields, `wrap`ped into responses of bounded
/// size. `make` runs on a blocking thread (it may read cgroup files).
pub fn stream<T, I, R>(
    make: impl FnOnce() -> I + Send + 'static,
    wrap: fn(Vec<T>) -> R,
) -> ListStream<R>
where
    T: prost::Message + Send + 'static,
    I: Iterator<Item = T>,
    R: Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<R, Status>>(1);
    tokio::task::spawn_blocking(move || {
        let send = |chunk: Vec<T>| tx.blocking_send(Ok(wrap(chunk))).is_ok();
        let mut chunk = Vec::new();
        let mut bytes = 0;
        for item in make() {
            let len = item.encoded_len();
            if !chunk.is_empty() && (chunk.len() == MAX_ITEMS || bytes + len > MAX_BYTES) {
                if !send(std::mem::take(&mut chunk)) {
                    return;
                }
                bytes = 0;
            }
            bytes += len;
            chunk.push(item);
        }
        if !chunk.is_empty() {
            send(chunk);
        }
    });
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::cri::{PodSandbox, StreamPodSandboxesResponse};
    use futures::StreamExt;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    fn wrap(pod_sandboxes: Vec<PodSandbox>) -> StreamPodSandboxesResponse {
        StreamPodSandboxesResponse { pod_sandboxes }
    }

    fn pod(i: usize, pad: usize) -> PodSandbox {
        PodSandbox {
            id: format!("{i:064}"),
            runtime_handler: "x".repeat(pad),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn every_item_once_in_bounded_chunks() {
        for (n, pad) in [
            (0, 0),
            (1, 0),
            (499, 0),
            (500, 0),
            (10_001, 0),
            (50, 300_000),
        ] {
            let s = stream(move || (0..n).map(move |i| pod(i, pad)), wrap);
            let chunks: Vec<_> = s.map(|r| r.expect("chunk").pod_sandboxes).collect().await;
            let ids: Vec<String> = chunks.iter().flatten().map(|p| p.id.clone()).collect();
            assert_eq!(ids, (0..n).map(|i| format!("{i:064}")).collect::<Vec<_>>());
            for c in &chunks {
                assert!(!c.is_empty() && c.len() <= MAX_ITEMS, "{n}: {}", c.len());
                let bytes: usize = c.iter().map(prost::Message::encoded_len).sum();
                assert!(bytes <= MAX_BYTES, "{n}: {bytes} bytes");
            }
        }
    }

    #[tokio::test]
    async fn an_oversized_item_goes_alone() {
        let s = stream(|| (0..3).map(|i| pod(i, MAX_BYTES + 10)), wrap);
        let sizes: Vec<usize> = s
            .map(|r| r.expect("chunk").pod_sandboxes.len())
            .collect()
            .await;
        assert_eq!(sizes, vec![1, 1, 1]);
    }

    #[tokio::test]
    async fn a_dropped_stream_stops_its_producer() {
        let made = Arc::new(AtomicUsize::new(0));
        let m = made.clone();
        let mut s = stream(
            move || {
                (0..1_000_000).map(move |i| {
                    m.fetch_add(1, Ordering::SeqCst);
                    pod(i, 0)
                })
            },
            wrap,
        );
        let first = s.next().await.expect("a chunk").expect("ok");
        assert_eq!(first.pod_sandboxes.len(), MAX_ITEMS);
        drop(s);
        // The producer notices at its next send, within two chunks.
        let mut last = 0;
        for _ in 0..100 {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            let now = made.load(Ordering::SeqCst);
            if now == last {
                break;
            }
            last = now;
        }
        assert!(last <= 4 * MAX_ITEMS, "{last} items made after the drop");
    }
}
