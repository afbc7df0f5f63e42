//! ttrpc over NRI's multiplexed connection: the wire of one plugin.
//!
//! A plugin's socket is a trunk carrying two connections (containerd/nri
//! `pkg/net/multiplex`): each chunk is `[conn id u32 BE][length u32 BE]`
//! then that many bytes of the connection's byte stream. On connection 1
//! (the plugin's services) husk is the ttrpc client; on connection 2 (the
//! runtime's services) husk is the server. Each connection carries ttrpc
//! frames: `[length u32 BE][stream id u32 BE][type u8][flags u8]` then a
//! protobuf `Request` (type 1) or `Response` (type 2).
//!
//! [`Conn`] owns the trunk: a reader task sorts frames, answers the
//! plugin's requests through a [`Serve`] callback, and hands responses
//! to the calls waiting for them. When the trunk closes, every waiting
//! call fails and [`Conn::closed`] resolves.

use crate::ttrpc::{
    encode_frame, take_frame, Request, Response, Status, MAX_MESSAGE, TTRPC_HEADER, TYPE_REQUEST,
    TYPE_RESPONSE,
};
use prost::Message;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;
use tokio::sync::{oneshot, watch};

/// The plugin's services (husk calls).
pub const PLUGIN_CONN: u32 = 1;
/// The runtime's services (the plugin calls).
pub const RUNTIME_CONN: u32 = 2;
/// The largest chunk husk writes. A Go plugin's side of the trunk hands
/// each chunk whole to one `Read` of ttrpc's 4 KiB buffered reader and
/// fails a larger one (ENOMEM: the plugin then hangs); Go's own writer
/// never makes one larger, through the same 4 KiB buffer.
const CHUNK: usize = 4096;
/// A failed call.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CallError {
    /// The plugin answered with an error status.
    #[error("{message} (code {code})")]
    Status { code: i32, message: String },
    /// No answer within the timeout.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The connection is gone, or spoke no ttrpc.
    #[error("connection closed: {0}")]
    Closed(String),
}

impl CallError {
    /// Whether the plugin can no longer be trusted with requests: closed,
    /// hung past its timeout, or speaking garbage (NRI's `isFatalError`).
    pub fn is_fatal(&self) -> bool {
        !matches!(self, CallError::Status { .. })
    }
}

/// An answer to a plugin's request, to come.
pub type Reply =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Vec<u8>, Status>> + Send>>;

/// What the plugin asks of husk: `(service, method, payload)` to a
/// payload or an error status. Each request is answered by a task of its
/// own, so a slow answer (an update applied to a container) never stops
/// the trunk's reading.
pub type Serve = Arc<dyn Fn(String, String, Vec<u8>) -> Reply + Send + Sync>;

type Pending = Arc<Mutex<HashMap<u32, oneshot::Sender<Result<Vec<u8>, CallError>>>>>;

/// One plugin's trunk.
pub struct Conn {
    writer: Arc<tokio::sync::Mutex<OwnedWriteHalf>>,
    pending: Pending,
    next: AtomicU32,
    /// The connection this side's calls go on ([`PLUGIN_CONN`] for the
    /// runtime, [`RUNTIME_CONN`] for a plugin).
    out: u32,
    closed: watch::Receiver<Option<String>>,
    /// Set by [`Conn::close`]: the reader stops even if the plugin is
    /// hung and never closes its end.
    stop: watch::Sender<bool>,
}

impl Conn {
    /// Takes `stream` as the runtime's end and starts reading it: calls
    /// go to the plugin's service, the plugin's requests are `serve`d.
    pub fn start(stream: UnixStream, serve: Serve) -> Arc<Conn> {
        Conn::start_as(stream, serve, PLUGIN_CONN)
    }

    /// Takes `stream` as a plugin's end (a plugin made by a test, or a
    /// tool): calls go to the runtime's service, its requests are `serve`d.
    pub fn start_plugin(stream: UnixStream, serve: Serve) -> Arc<Conn> {
        Conn::start_as(stream, serve, RUNTIME_CONN)
    }

    fn start_as(stream: UnixStream, serve: Serve, out: u32) -> Arc<Conn> {
        let (r, w) = stream.into_split();
        let (tx, rx) = watch::channel(None);
        let (stop, mut stopped) = watch::channel(false);
        let conn = Arc::new(Conn {
            writer: Arc::new(tokio::sync::Mutex::new(w)),
            pending: Arc::default(),
            next: AtomicU32::new(1),
            out,
            closed: rx,
            stop,
        });
        let (writer, pending) = (conn.writer.clone(), conn.pending.clone());
        tokio::spawn(async move {
            let why = tokio::select! {
                r = read_loop(r, writer.clone(), pending.clone(), serve, out) => r,
                _ = stopped.changed() => Err("closed by husk".to_string()),
            };
            let why = match why {
                Ok(()) => "the plugin closed it".to_string(),
                Err(e) => e,
            };
            for (_, waiter) in pending.lock().unwrap_or_else(|p| p.into_inner()).drain() {
                let _ = waiter.send(Err(CallError::Closed(why.clone())));
            }
            // Bounded: a writer stuck on a hung plugin's full buffer holds
            // the lock.
            let _ = tokio::time::timeout(Duration::from_secs(1), async {
                writer.lock().await.shutdown().await
            })
            .await;
            let _ = tx.send(Some(why));
        });
        conn
    }

    /// Calls `service/method` on the plugin, waiting at most `timeout`.
    pub async fn call(
        &self,
        service: &str,
        method: &str,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, CallError> {
        if let Some(why) = self.closed.borrow().clone() {
            return Err(CallError::Closed(why));
        }
        let req = Request {
            service: service.into(),
            method: method.into(),
            payload,
            timeout_nano: timeout.as_nanos().min(i64::MAX as u128) as i64,
            metadata: Vec::new(),
        };
        let body = req.encode_to_vec();
        let (tx, rx) = oneshot::channel();
        // 0 until an id is taken; ids start at 1.
        let taken = AtomicU32::new(0);
        // The write is inside the timeout too: a hung plugin whose socket
        // buffer is full must not hold the call past it.
        let exchange = async {
            {
                // The id is taken under the writer's lock, so ids reach the
                // wire in increasing order: a Go ttrpc server refuses a
                // stream id lower than one it has seen.
                let mut w = self.writer.lock().await;
                let id = self.next.fetch_add(2, Ordering::Relaxed);
                taken.store(id, Ordering::Relaxed);
                let out = frame(self.out, id, TYPE_REQUEST, &body).map_err(CallError::Closed)?;
                self.pending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(id, tx);
                w.write_all(&out)
                    .await
                    .map_err(|e| CallError::Closed(format!("write: {e}")))?;
            }
            rx.await
                .unwrap_or_else(|_| Err(CallError::Closed("the reader is gone".into())))
        };
        let r = match tokio::time::timeout(timeout, exchange).await {
            Ok(r) => r,
            Err(_) => Err(CallError::Timeout(timeout)),
        };
        if r.is_err() {
            self.forget(taken.load(Ordering::Relaxed));
        }
        r
    }

    fn forget(&self, id: u32) {
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
    }

    /// Resolves when the trunk is closed; the reason.
    pub async fn closed(&self) -> String {
        let mut rx = self.closed.clone();
        loop {
            if let Some(why) = rx.borrow().clone() {
                return why;
            }
            if rx.changed().await.is_err() {
                return "the connection is gone".into();
            }
        }
    }

    /// Whether the trunk is closed.
    pub fn is_closed(&self) -> bool {
        self.closed.borrow().is_some()
    }

    /// Closes the trunk: the reader stops (dropping the socket) and every
    /// waiting call fails.
    pub async fn close(&self) {
        let _ = self.stop.send(true);
        let _ = tokio::time::timeout(Duration::from_secs(2), self.closed()).await;
    }
}

/// Reads chunks until the trunk ends; an error says why it was dropped.
async fn read_loop(
    mut r: OwnedReadHalf,
    writer: Arc<tokio::sync::Mutex<OwnedWriteHalf>>,
    pending: Pending,
    serve: Serve,
    out: u32,
) -> Result<(), String> {
    // The other side's calls come on the other connection.
    let inc = if out == PLUGIN_CONN {
        RUNTIME_CONN
    } else {
        PLUGIN_CONN
    };
    // The byte stream of each connection, until a frame is whole.
    let mut streams: HashMap<u32, Vec<u8>> = HashMap::new();
    loop {
        let mut hdr = [0u8; 8];
        match r.read_exact(&mut hdr).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(format!("read: {e}")),
        }
        let conn = u32::from_be_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
        let len = u32::from_be_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]) as usize;
        if len > MAX_MESSAGE + TTRPC_HEADER {
            return Err(format!("a chunk of {len} bytes, over ttrpc's limit"));
        }
        if conn != PLUGIN_CONN && conn != RUNTIME_CONN {
            return Err(format!(
                "a chunk for connection {conn}, which NRI does not use"
            ));
        }
        let mut chunk = vec![0u8; len];
        r.read_exact(&mut chunk)
            .await
            .map_err(|e| format!("read: {e}"))?;
        let buf = streams.entry(conn).or_default();
        buf.extend_from_slice(&chunk);
        while let Some((id, kind, body)) = take_frame(buf)? {
            match (conn, kind) {
                (c, TYPE_RESPONSE) if c == out => {
                    let resp = Response::decode(body.as_slice())
                        .map_err(|e| format!("a response that is not ttrpc's: {e}"))?;
                    let r = match resp.status {
                        Some(s) if s.code != 0 => Err(CallError::Status {
                            code: s.code,
                            message: s.message,
                        }),
                        _ => Ok(resp.payload),
                    };
                    let waiter = pending
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(&id);
                    if let Some(w) = waiter {
                        let _ = w.send(r);
                    }
                }
                (c, TYPE_REQUEST) if c == inc => {
                    let req = Request::decode(body.as_slice())
                        .map_err(|e| format!("a request that is not ttrpc's: {e}"))?;
                    let answer = serve(req.service, req.method, req.payload);
                    let writer = writer.clone();
                    tokio::spawn(async move {
                        let resp = match answer.await {
                            Ok(payload) => Response {
                                status: None,
                                payload,
                            },
                            Err(s) => Response {
                                status: Some(s),
                                payload: Vec::new(),
                            },
                        };
                        let body = resp.encode_to_vec();
                        let _ = write_frame(&writer, inc, id, TYPE_RESPONSE, &body).await;
                    });
                }
                (c, k) => return Err(format!("a frame of type {k} on connection {c}")),
            }
        }
    }
}

/// One ttrpc frame on connection `conn`, written as trunk chunks.
async fn write_frame(
    writer: &tokio::sync::Mutex<OwnedWriteHalf>,
    conn: u32,
    id: u32,
    kind: u8,
    body: &[u8],
) -> Result<(), String> {
    let out = frame(conn, id, kind, body)?;
    let mut w = writer.lock().await;
    w.write_all(&out).await.map_err(|e| format!("write: {e}"))
}

/// One ttrpc frame on connection `conn`, as trunk chunks.
fn frame(conn: u32, id: u32, kind: u8, body: &[u8]) -> Result<Vec<u8>, String> {
    let frame = encode_frame(id, kind, body)?;
    Ok(chunks(conn, &frame))
}

/// `frame` as trunk chunks of at most [`CHUNK`] bytes each.
fn chunks(conn: u32, frame: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(frame.len() + 8 * (frame.len() / CHUNK + 1));
    for part in frame.chunks(CHUNK) {
        out.extend_from_slice(&conn.to_be_bytes());
        out.extend_from_slice(&(part.len() as u32).to_be_bytes());
        out.extend_from_slice(part);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_taken_whole_and_in_order() {
        let mut buf = Vec::new();
        for (id, body) in [(1u32, b"ab".to_vec()), (3, b"cde".to_vec())] {
            buf.extend_from_slice(&(body.len() as u32).to_be_bytes());
            buf.extend_from_slice(&id.to_be_bytes());
            buf.extend_from_slice(&[TYPE_RESPONSE, 0]);
            buf.extend_from_slice(&body);
        }
        let tail = buf.split_off(buf.len() - 1);
        assert_eq!(
            take_frame(&mut buf).expect("test"),
            Some((1, TYPE_RESPONSE, b"ab".to_vec()))
        );
        assert_eq!(take_frame(&mut buf).expect("test"), None, "not whole yet");
        buf.extend_from_slice(&tail);
        assert_eq!(
            take_frame(&mut buf).expect("test"),
            Some((3, TYPE_RESPONSE, b"cde".to_vec()))
        );
        assert!(buf.is_empty());
    }

    #[test]
    fn a_large_frame_goes_in_chunks_a_go_reader_takes() {
        let frame: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        let out = chunks(PLUGIN_CONN, &frame);
        let (mut at, mut back, mut sizes) = (0, Vec::new(), Vec::new());
        while at < out.len() {
            assert_eq!(out[at..at + 4], PLUGIN_CONN.to_be_bytes());
            let n = u32::from_be_bytes(out[at + 4..at + 8].try_into().expect("4 bytes")) as usize;
            sizes.push(n);
            back.extend_from_slice(&out[at + 8..at + 8 + n]);
            at += 8 + n;
        }
        assert_eq!(sizes, [4096, 4096, 1808]);
        assert_eq!(back, frame);
    }

    #[test]
    fn an_oversized_frame_is_refused() {
        let mut buf = ((MAX_MESSAGE + 1) as u32).to_be_bytes().to_vec();
        buf.extend_from_slice(&[0; 6]);
        assert!(take_frame(&mut buf).is_err());
    }

    #[tokio::test]
    async fn a_call_is_answered_and_a_request_served_over_one_trunk() {
        let (a, mut b) = UnixStream::pair().expect("pair");
        let serve: Serve = Arc::new(|s, m, p| {
            Box::pin(async move {
                if s == "svc" && m == "Echo" {
                    Ok(p)
                } else {
                    Err(Status {
                        code: 12,
                        message: format!("{s}/{m}"),
                    })
                }
            })
        });
        let conn = Conn::start(a, serve);
        // The far side: answer the call on connection 1 in two chunks,
        // then make a request on connection 2.
        let far = tokio::spawn(async move {
            let mut hdr = [0u8; 8];
            b.read_exact(&mut hdr).await.expect("test");
            let len = u32::from_be_bytes(hdr[4..8].try_into().expect("test")) as usize;
            let mut frame = vec![0u8; len];
            b.read_exact(&mut frame).await.expect("test");
            let mut fb = frame.clone();
            let (id, kind, body) = take_frame(&mut fb).expect("test").expect("test");
            assert_eq!(kind, TYPE_REQUEST);
            let req = Request::decode(body.as_slice()).expect("test");
            assert_eq!((req.service.as_str(), req.method.as_str()), ("p", "Hello"));
            let resp = Response {
                status: None,
                payload: b"hi".to_vec(),
            }
            .encode_to_vec();
            let mut f = (resp.len() as u32).to_be_bytes().to_vec();
            f.extend_from_slice(&id.to_be_bytes());
            f.extend_from_slice(&[TYPE_RESPONSE, 0]);
            f.extend_from_slice(&resp);
            for part in [&f[..3], &f[3..]] {
                let mut c = PLUGIN_CONN.to_be_bytes().to_vec();
                c.extend_from_slice(&(part.len() as u32).to_be_bytes());
                c.extend_from_slice(part);
                b.write_all(&c).await.expect("test");
            }
            let req = Request {
                service: "svc".into(),
                method: "Echo".into(),
                payload: b"ping".to_vec(),
                timeout_nano: 0,
                metadata: Vec::new(),
            }
            .encode_to_vec();
            let mut f = (req.len() as u32).to_be_bytes().to_vec();
            f.extend_from_slice(&1u32.to_be_bytes());
            f.extend_from_slice(&[TYPE_REQUEST, 0]);
            f.extend_from_slice(&req);
            let mut c = RUNTIME_CONN.to_be_bytes().to_vec();
            c.extend_from_slice(&(f.len() as u32).to_be_bytes());
            c.extend_from_slice(&f);
            b.write_all(&c).await.expect("test");
            b.read_exact(&mut hdr).await.expect("test");
            assert_eq!(
                u32::from_be_bytes(hdr[0..4].try_into().expect("test")),
                RUNTIME_CONN
            );
            let len = u32::from_be_bytes(hdr[4..8].try_into().expect("test")) as usize;
            let mut frame = vec![0u8; len];
            b.read_exact(&mut frame).await.expect("test");
            let (_, kind, body) = take_frame(&mut frame).expect("test").expect("test");
            assert_eq!(kind, TYPE_RESPONSE);
            Response::decode(body.as_slice()).expect("test").payload
        });
        let got = conn
            .call("p", "Hello", b"x".to_vec(), Duration::from_secs(5))
            .await;
        assert_eq!(got, Ok(b"hi".to_vec()));
        assert_eq!(far.await.expect("test"), b"ping".to_vec());
        // The far side is gone: the trunk is closed, calls fail at once.
        assert!(!conn.closed().await.is_empty());
        let e = conn
            .call("p", "Hello", vec![], Duration::from_secs(5))
            .await
            .expect_err("closed");
        assert!(e.is_fatal(), "{e:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_calls_reach_the_wire_with_increasing_ids() {
        let (a, mut b) = UnixStream::pair().expect("pair");
        let conn = Conn::start(a, Arc::new(|_, _, _| Box::pin(async { Ok(vec![]) })));
        const N: usize = 200;
        // The far side: every request's id must be above the last one, as
        // a Go ttrpc server requires; each is answered with its own id.
        let far = tokio::spawn(async move {
            let mut last = 0u32;
            for _ in 0..N {
                let mut hdr = [0u8; 8];
                b.read_exact(&mut hdr).await.expect("test");
                let len = u32::from_be_bytes(hdr[4..8].try_into().expect("test")) as usize;
                let mut f = vec![0u8; len];
                b.read_exact(&mut f).await.expect("test");
                let (id, _, _) = take_frame(&mut f).expect("test").expect("whole");
                assert!(id > last, "id {id} after {last}");
                last = id;
                let resp = Response {
                    status: None,
                    payload: id.to_be_bytes().to_vec(),
                }
                .encode_to_vec();
                let out = frame(PLUGIN_CONN, id, TYPE_RESPONSE, &resp).expect("test");
                b.write_all(&out).await.expect("test");
            }
            b
        });
        let calls: Vec<_> = (0..N)
            .map(|_| {
                let conn = conn.clone();
                tokio::spawn(async move {
                    conn.call("p", "Hello", vec![7; 64], Duration::from_secs(10))
                        .await
                })
            })
            .collect();
        let mut ids = Vec::new();
        for c in calls {
            let got = c.await.expect("test").expect("answered");
            ids.push(u32::from_be_bytes(got.try_into().expect("an id")));
        }
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), N, "each call got its own answer");
        let _b = far.await.expect("the ids increased");
    }

    #[tokio::test]
    async fn a_silent_plugin_times_out() {
        let (a, _b) = UnixStream::pair().expect("pair");
        let conn = Conn::start(a, Arc::new(|_, _, _| Box::pin(async { Ok(vec![]) })));
        let e = conn
            .call("p", "Hello", vec![], Duration::from_millis(50))
            .await
            .expect_err("no answer");
        assert_eq!(e, CallError::Timeout(Duration::from_millis(50)));
        assert!(e.is_fatal());
    }
}
