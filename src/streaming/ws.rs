//! WebSocket (RFC 6455) framing for both ends: the accept key of the
//! opening handshake, frames in and out (clients mask, servers do not),
//! fragmented messages reassembled, PING answered with PONG and CLOSE
//! echoed by the connection's reader.
//!
//! A connection is split like the SPDY session: a writer task owns the
//! socket's write half (so PONGs and data never interleave mid-frame) and
//! the caller reads whole messages from `Reader`.

use base64::Engine as _;
use sha1::{Digest, Sha1};
use std::io;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
/// Largest message accepted.
pub const MAX_MESSAGE: usize = 16 << 20;

const OP_CONT: u8 = 0;
const OP_TEXT: u8 = 1;
const OP_BINARY: u8 = 2;
const OP_CLOSE: u8 = 8;
const OP_PING: u8 = 9;
const OP_PONG: u8 = 10;

/// `Sec-WebSocket-Accept` for a `Sec-WebSocket-Key`.
pub fn accept_key(key: &str) -> String {
    let mut h = Sha1::new();
    h.update(key.trim().as_bytes());
    h.update(GUID.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(h.finalize())
}

/// A fresh `Sec-WebSocket-Key`.
pub fn new_key() -> String {
    base64::engine::general_purpose::STANDARD.encode(rand::random::<[u8; 16]>())
}

#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    Binary(Vec<u8>),
    Text(Vec<u8>),
}

enum Out {
    Frame(u8, Vec<u8>),
    Close,
}

/// The sending side; cheap to clone.
#[derive(Clone)]
pub struct Writer {
    out: mpsc::Sender<Out>,
}

fn gone() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "websocket closed")
}

impl Writer {
    pub async fn binary(&self, data: Vec<u8>) -> io::Result<()> {
        self.out
            .send(Out::Frame(OP_BINARY, data))
            .await
            .map_err(|_| gone())
    }

    pub async fn text(&self, data: Vec<u8>) -> io::Result<()> {
        self.out
            .send(Out::Frame(OP_TEXT, data))
            .await
            .map_err(|_| gone())
    }

    /// Sends a normal-closure CLOSE, flushes, and closes the write side.
    pub async fn close(&self) {
        let _ = self.out.send(Out::Close).await;
    }
}

/// The receiving side.
pub struct Reader<R> {
    rd: R,
    ctl: mpsc::Sender<Out>,
    server: bool,
}

fn encode(op: u8, payload: &[u8], mask: bool, out: &mut Vec<u8>) {
    out.push(0x80 | op);
    let m = if mask { 0x80 } else { 0 };
    match payload.len() {
        n if n < 126 => out.push(m | n as u8),
        n if n <= 0xffff => {
            out.push(m | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(m | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    if mask {
        let key: [u8; 4] = rand::random();
        out.extend_from_slice(&key);
        out.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
    } else {
        out.extend_from_slice(payload);
    }
}

/// Starts the writer task on `wr`; `server` decides masking.
pub fn split<IO>(io: IO, server: bool) -> (Reader<tokio::io::ReadHalf<IO>>, Writer)
where
    IO: AsyncRead + AsyncWrite + Send + 'static,
{
    let (rd, mut wr) = tokio::io::split(io);
    let (tx, mut rx) = mpsc::channel::<Out>(256);
    tokio::spawn(async move {
        let mut buf = Vec::new();
        'run: while let Some(first) = rx.recv().await {
            let mut next = Some(first);
            while let Some(o) = next.take() {
                match o {
                    Out::Frame(op, data) => encode(op, &data, !server, &mut buf),
                    Out::Close => {
                        encode(OP_CLOSE, &1000u16.to_be_bytes(), !server, &mut buf);
                        let _ = wr.write_all(&buf).await;
                        let _ = wr.shutdown().await;
                        break 'run;
                    }
                }
                if buf.len() < 256 * 1024 {
                    next = rx.try_recv().ok();
                }
            }
            if wr.write_all(&buf).await.is_err() || wr.flush().await.is_err() {
                break;
            }
            buf.clear();
        }
        rx.close();
    });
    (
        Reader {
            rd,
            ctl: tx.clone(),
            server,
        },
        Writer { out: tx },
    )
}

impl<R: AsyncRead + Unpin> Reader<R> {
    /// The next data message; `Ok(None)` after a CLOSE or a clean EOF.
    pub async fn next(&mut self) -> io::Result<Option<Message>> {
        let mut msg: Vec<u8> = Vec::new();
        let mut msg_op: Option<u8> = None;
        loop {
            let mut h = [0u8; 2];
            match self.rd.read_exact(&mut h).await {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
                Err(e) => return Err(e),
            }
            let fin = h[0] & 0x80 != 0;
            let op = h[0] & 0x0f;
            let masked = h[1] & 0x80 != 0;
            let len = match h[1] & 0x7f {
                126 => {
                    let mut b = [0u8; 2];
                    self.rd.read_exact(&mut b).await?;
                    u16::from_be_bytes(b) as usize
                }
                127 => {
                    let mut b = [0u8; 8];
                    self.rd.read_exact(&mut b).await?;
                    u64::from_be_bytes(b) as usize
                }
                n => n as usize,
            };
            if len > MAX_MESSAGE || msg.len() + len > MAX_MESSAGE {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "websocket message too large",
                ));
            }
            if self.server && !masked {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "unmasked websocket frame from a client",
                ));
            }
            let mut key = [0u8; 4];
            if masked {
                self.rd.read_exact(&mut key).await?;
            }
            let mut payload = vec![0u8; len];
            self.rd.read_exact(&mut payload).await?;
            if masked {
                for (i, b) in payload.iter_mut().enumerate() {
                    *b ^= key[i % 4];
                }
            }
            match op {
                OP_PING => {
                    let _ = self.ctl.send(Out::Frame(OP_PONG, payload)).await;
                }
                OP_PONG => {}
                OP_CLOSE => {
                    let _ = self.ctl.send(Out::Close).await;
                    return Ok(None);
                }
                OP_TEXT | OP_BINARY | OP_CONT => {
                    if op != OP_CONT {
                        msg_op = Some(op);
                    }
                    msg.extend_from_slice(&payload);
                    if fin {
                        return Ok(Some(match msg_op {
                            Some(OP_TEXT) => Message::Text(msg),
                            _ => Message::Binary(msg),
                        }));
                    }
                }
                other => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("websocket opcode {other} is not supported"),
                    ))
                }
            }
        }
    }
}

/// A byte stream carried in binary messages (the SPDY-over-WebSocket
/// tunnel of client-go's port-forward): returns one end of a duplex pipe
/// whose other end is pumped to and from the WebSocket.
pub fn tunnel<IO>(io: IO, server: bool) -> tokio::io::DuplexStream
where
    IO: AsyncRead + AsyncWrite + Send + 'static,
{
    let (mine, theirs) = tokio::io::duplex(256 * 1024);
    let (mut r, w) = split(io, server);
    let (mut pr, mut pw) = tokio::io::split(mine);
    tokio::spawn(async move {
        while let Ok(Some(m)) = r.next().await {
            let data = match m {
                Message::Binary(d) | Message::Text(d) => d,
            };
            if pw.write_all(&data).await.is_err() {
                break;
            }
        }
        let _ = pw.shutdown().await;
    });
    tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match pr.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if w.binary(buf[..n].to_vec()).await.is_err() {
                        break;
                    }
                }
            }
        }
        w.close().await;
    });
    theirs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_key_matches_rfc_example() {
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[tokio::test]
    async fn messages_ping_and_close() {
        let (a, b) = tokio::io::duplex(1 << 16);
        let (mut cr, cw) = split(a, false);
        let (mut sr, sw) = split(b, true);
        cw.binary(vec![1, 2, 3]).await.expect("send");
        let big = vec![9u8; 70_000];
        cw.binary(big.clone()).await.expect("send big");
        assert_eq!(
            sr.next().await.expect("read"),
            Some(Message::Binary(vec![1, 2, 3]))
        );
        assert_eq!(sr.next().await.expect("read"), Some(Message::Binary(big)));
        sw.text(b"1abc".to_vec()).await.expect("text");
        assert_eq!(
            cr.next().await.expect("read"),
            Some(Message::Text(b"1abc".to_vec()))
        );
        cw.close().await;
        assert_eq!(sr.next().await.expect("close"), None);
    }
}
