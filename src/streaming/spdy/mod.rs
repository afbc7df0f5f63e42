//! A SPDY/3.1 session over any byte stream, for both ends: the streaming
//! server (which accepts the client's streams) and husk's own client
//! (which opens them).
//!
//! One reader task demultiplexes frames onto per-stream channels, answers
//! PINGs, and replies SYN_REPLY to every accepted SYN_STREAM (as
//! apimachinery's server does); one writer task owns the header compressor
//! and writes frames in the order they were queued. Like spdystream there
//! is no flow control: WINDOW_UPDATE and SETTINGS are read and ignored.
//! Dropping the last `Session` handle aborts the reader; the writer ends
//! once every queued frame is written.

pub mod frame;

use bytes::Bytes;
pub use frame::{Frame, Headers};
use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

/// Largest data frame sent.
const MAX_DATA: usize = 64 * 1024;
/// Chunks buffered per stream before the reader waits for the consumer.
const STREAM_BUFFER: usize = 64;

enum Out {
    Frame(Frame),
    Shutdown,
}

#[derive(Default)]
struct Shared {
    /// Senders of streams whose peer side is still open.
    streams: HashMap<u32, mpsc::Sender<Bytes>>,
    /// Streams this side opened that wait for SYN_REPLY.
    pending: HashMap<u32, oneshot::Sender<bool>>,
    next_id: u32,
    last_received: u32,
    closed: bool,
}

/// One end of a SPDY connection.
pub struct Session {
    out: mpsc::Sender<Out>,
    shared: Arc<Mutex<Shared>>,
    reader: tokio::task::JoinHandle<()>,
}

/// A stream the peer opened (already replied to).
pub struct Incoming {
    pub id: u32,
    pub headers: Headers,
    pub reader: StreamReader,
    pub writer: StreamWriter,
}

/// The receiving half of a stream: `None` once the peer finished it.
pub struct StreamReader {
    rx: mpsc::Receiver<Bytes>,
}

impl StreamReader {
    pub async fn recv(&mut self) -> Option<Bytes> {
        self.rx.recv().await
    }

    /// The channel behind the stream, for code that takes byte channels.
    pub fn into_channel(self) -> mpsc::Receiver<Bytes> {
        self.rx
    }
}

/// The sending half of a stream; cheap to clone.
#[derive(Clone)]
pub struct StreamWriter {
    id: u32,
    out: mpsc::Sender<Out>,
}

fn gone() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "spdy connection closed")
}

impl StreamWriter {
    pub fn id(&self) -> u32 {
        self.id
    }

    pub async fn send(&self, data: &[u8]) -> io::Result<()> {
        for chunk in data.chunks(MAX_DATA) {
            self.out
                .send(Out::Frame(Frame::Data {
                    stream: self.id,
                    fin: false,
                    data: Bytes::copy_from_slice(chunk),
                }))
                .await
                .map_err(|_| gone())?;
        }
        Ok(())
    }

    /// Half-closes the stream (an empty data frame with FIN).
    pub async fn close(&self) {
        let _ = self
            .out
            .send(Out::Frame(Frame::Data {
                stream: self.id,
                fin: true,
                data: Bytes::new(),
            }))
            .await;
    }

    pub async fn reset(&self) {
        let _ = self
            .out
            .send(Out::Frame(Frame::RstStream {
                stream: self.id,
                status: frame::RST_CANCEL,
            }))
            .await;
    }
}

impl Session {
    /// Starts a session on `io`; a server numbers its streams even, a
    /// client odd. Streams the peer opens arrive on the returned channel.
    pub fn start<IO>(io: IO, server: bool) -> io::Result<(Session, mpsc::Receiver<Incoming>)>
    where
        IO: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (mut rd, mut wr) = tokio::io::split(io);
        let mut enc = frame::HeaderEncoder::new()?;
        let (out_tx, mut out_rx) = mpsc::channel::<Out>(256);
        let (in_tx, in_rx) = mpsc::channel::<Incoming>(16);
        let shared = Arc::new(Mutex::new(Shared {
            next_id: if server { 2 } else { 1 },
            ..Default::default()
        }));

        tokio::spawn(async move {
            let mut buf = Vec::with_capacity(MAX_DATA + 64);
            'run: while let Some(first) = out_rx.recv().await {
                let mut next = Some(first);
                // Batch whatever is queued into one write.
                while let Some(o) = next.take() {
                    match o {
                        Out::Frame(f) => {
                            if frame::encode(&f, &mut enc, &mut buf).is_err() {
                                break 'run;
                            }
                        }
                        Out::Shutdown => {
                            let _ = wr.write_all(&buf).await;
                            let _ = wr.shutdown().await;
                            break 'run;
                        }
                    }
                    if buf.len() < 256 * 1024 {
                        next = out_rx.try_recv().ok();
                    }
                }
                if wr.write_all(&buf).await.is_err() {
                    break;
                }
                buf.clear();
                if wr.flush().await.is_err() {
                    break;
                }
            }
            // Drain so senders never block on a dead writer.
            out_rx.close();
        });

        let sh = shared.clone();
        let out = out_tx.clone();
        let reader = tokio::spawn(async move {
            let mut dec = frame::HeaderDecoder::new();
            let my_parity = if server { 0 } else { 1 };
            loop {
                let f = match frame::read(&mut rd, &mut dec).await {
                    Ok(Some(f)) => f,
                    Ok(None) => break,
                    Err(e) => {
                        tracing::debug!(error = %e, "spdy read");
                        break;
                    }
                };
                match f {
                    Frame::SynStream {
                        stream,
                        flags,
                        headers,
                        ..
                    } => {
                        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
                        let refused = {
                            let mut g = lock(&sh);
                            if g.closed
                                || stream % 2 == my_parity
                                || g.streams.contains_key(&stream)
                            {
                                true
                            } else {
                                g.last_received = g.last_received.max(stream);
                                if flags & frame::FLAG_FIN == 0 {
                                    g.streams.insert(stream, tx);
                                }
                                false
                            }
                        };
                        if refused {
                            let _ = out
                                .send(Out::Frame(Frame::RstStream {
                                    stream,
                                    status: frame::RST_PROTOCOL_ERROR,
                                }))
                                .await;
                            continue;
                        }
                        let _ = out
                            .send(Out::Frame(Frame::SynReply {
                                stream,
                                flags: 0,
                                headers: Headers::new(),
                            }))
                            .await;
                        let inc = Incoming {
                            id: stream,
                            headers,
                            reader: StreamReader { rx },
                            writer: StreamWriter {
                                id: stream,
                                out: out.clone(),
                            },
                        };
                        if in_tx.send(inc).await.is_err() {
                            let _ = out
                                .send(Out::Frame(Frame::RstStream {
                                    stream,
                                    status: frame::RST_REFUSED,
                                }))
                                .await;
                        }
                    }
                    Frame::SynReply { stream, flags, .. } => {
                        let mut g = lock(&sh);
                        if let Some(p) = g.pending.remove(&stream) {
                            let _ = p.send(true);
                        }
                        if flags & frame::FLAG_FIN != 0 {
                            g.streams.remove(&stream);
                        }
                    }
                    Frame::Data { stream, fin, data } => {
                        let tx = lock(&sh).streams.get(&stream).cloned();
                        if let Some(tx) = tx {
                            if !data.is_empty() {
                                // A consumer that went away just loses data.
                                let _ = tx.send(data).await;
                            }
                        }
                        if fin {
                            lock(&sh).streams.remove(&stream);
                        }
                    }
                    Frame::RstStream { stream, .. } => {
                        let mut g = lock(&sh);
                        g.streams.remove(&stream);
                        if let Some(p) = g.pending.remove(&stream) {
                            let _ = p.send(false);
                        }
                    }
                    Frame::Ping(id) => {
                        if id % 2 != my_parity {
                            let _ = out.send(Out::Frame(Frame::Ping(id))).await;
                        }
                    }
                    Frame::GoAway { .. } => {
                        lock(&sh).closed = true;
                    }
                    Frame::HeadersFrame { stream, flags, .. } => {
                        if flags & frame::FLAG_FIN != 0 {
                            lock(&sh).streams.remove(&stream);
                        }
                    }
                    Frame::Settings | Frame::WindowUpdate { .. } | Frame::Unknown(_) => {}
                }
            }
            let mut g = lock(&sh);
            g.closed = true;
            g.streams.clear();
            for (_, p) in g.pending.drain() {
                let _ = p.send(false);
            }
        });
        Ok((
            Session {
                out: out_tx,
                shared,
                reader,
            },
            in_rx,
        ))
    }

    /// Opens a stream and waits for the peer's SYN_REPLY.
    pub async fn open(
        &self,
        headers: Headers,
        timeout: Duration,
    ) -> io::Result<(StreamReader, StreamWriter)> {
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        let (rtx, rrx) = oneshot::channel();
        let id = {
            let mut g = lock(&self.shared);
            if g.closed {
                return Err(gone());
            }
            let id = g.next_id;
            g.next_id += 2;
            g.streams.insert(id, tx);
            g.pending.insert(id, rtx);
            id
        };
        self.out
            .send(Out::Frame(Frame::SynStream {
                stream: id,
                associated: 0,
                priority: 0,
                flags: 0,
                headers,
            }))
            .await
            .map_err(|_| gone())?;
        match tokio::time::timeout(timeout, rrx).await {
            Ok(Ok(true)) => Ok((
                StreamReader { rx },
                StreamWriter {
                    id,
                    out: self.out.clone(),
                },
            )),
            Ok(_) => Err(io::Error::new(
                io::ErrorKind::ConnectionRefused,
                format!("spdy stream {id} was refused"),
            )),
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no reply to spdy stream {id}"),
            )),
        }
    }

    /// Sends GOAWAY, flushes what is queued and closes the write side.
    pub async fn close(&self) {
        let last = {
            let mut g = lock(&self.shared);
            g.closed = true;
            g.last_received
        };
        let _ = self
            .out
            .send(Out::Frame(Frame::GoAway {
                last_good: last,
                status: 0,
            }))
            .await;
        let _ = self.out.send(Out::Shutdown).await;
    }

    /// Resolves when the peer has closed the connection.
    pub async fn closed(&self) {
        while !self.reader.is_finished() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

fn lock(m: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn client_and_server_exchange_streams() {
        let (a, b) = tokio::io::duplex(1 << 16);
        let (client, _) = Session::start(a, false).expect("client");
        let (server, mut incoming) = Session::start(b, true).expect("server");
        let srv = tokio::spawn(async move {
            let mut s = incoming.recv().await.expect("stream");
            assert_eq!(s.headers.get("streamType"), Some("stdin"));
            let mut got = Vec::new();
            while let Some(d) = s.reader.recv().await {
                got.extend_from_slice(&d);
            }
            s.writer.send(&got).await.expect("echo");
            s.writer.close().await;
            server
        });
        let (mut r, w) = client
            .open(
                Headers::new().with("streamType", "stdin"),
                Duration::from_secs(5),
            )
            .await
            .expect("open");
        let big = vec![7u8; 200_000];
        w.send(&big).await.expect("send");
        w.close().await;
        let mut back = Vec::new();
        while let Some(d) = r.recv().await {
            back.extend_from_slice(&d);
        }
        assert_eq!(back, big);
        let server = srv.await.expect("server task");
        server.close().await;
        client.closed().await;
    }
}
