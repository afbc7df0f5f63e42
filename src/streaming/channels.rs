//! The streams of one exec or attach session, whichever transport carries
//! them. Over SPDY each is a stream the client opened with a `streamType`
//! header (error, stdin, stdout, stderr, resize); over WebSocket each is a
//! channel number prefixed to every message (0 stdin, 1 stdout, 2 stderr,
//! 3 error, 4 resize; the base64 protocols prefix an ASCII digit and
//! base64 the rest; v5 adds the CLOSE signal `[255, channel]`).
//!
//! Incoming data (stdin, resize) arrives on byte channels that end when
//! the client closes them; outgoing data goes through `Sink`s.

use super::spdy;
use super::ws;
use base64::Engine as _;
use bytes::Bytes;
use std::io;
use tokio::sync::mpsc;

pub const STDIN: u8 = 0;
pub const STDOUT: u8 = 1;
pub const STDERR: u8 = 2;
pub const ERROR: u8 = 3;
pub const RESIZE: u8 = 4;
/// v5.channel.k8s.io: `[CLOSE, channel]` half-closes a channel.
pub const CLOSE: u8 = 255;

/// Where one outgoing stream goes.
#[derive(Clone)]
pub enum Sink {
    Spdy(spdy::StreamWriter),
    Ws {
        channel: u8,
        writer: ws::Writer,
        base64: bool,
    },
}

impl Sink {
    pub async fn send(&self, data: &[u8]) -> io::Result<()> {
        match self {
            Sink::Spdy(w) => w.send(data).await,
            Sink::Ws {
                channel,
                writer,
                base64,
            } => ws_send(writer, *channel, *base64, data).await,
        }
    }

    /// Half-closes: FIN over SPDY; nothing over WebSocket (the connection's
    /// close ends every channel).
    pub async fn close(&self) {
        if let Sink::Spdy(w) = self {
            w.close().await;
        }
    }
}

/// Sends one channel message.
pub async fn ws_send(w: &ws::Writer, channel: u8, base64: bool, data: &[u8]) -> io::Result<()> {
    if base64 {
        let mut m = vec![b'0' + channel];
        m.extend_from_slice(
            base64::engine::general_purpose::STANDARD
                .encode(data)
                .as_bytes(),
        );
        w.text(m).await
    } else {
        let mut m = Vec::with_capacity(data.len() + 1);
        m.push(channel);
        m.extend_from_slice(data);
        w.binary(m).await
    }
}

/// Splits a received channel message into (channel, payload).
pub fn ws_decode(m: ws::Message, base64: bool) -> Option<(u8, Vec<u8>)> {
    let data = match m {
        ws::Message::Binary(d) | ws::Message::Text(d) => d,
    };
    let (&first, rest) = data.split_first()?;
    if base64 {
        let ch = first.checked_sub(b'0')?;
        let payload = base64::engine::general_purpose::STANDARD
            .decode(rest)
            .ok()?;
        Some((ch, payload))
    } else {
        Some((first, rest.to_vec()))
    }
}

/// The connection under a session, closed when the session ends.
pub enum Conn {
    Spdy(spdy::Session),
    Ws(ws::Writer, tokio::task::JoinHandle<()>),
}

impl Conn {
    /// Closes the connection (GOAWAY or a WebSocket CLOSE).
    pub async fn close(self) {
        match self {
            Conn::Spdy(s) => {
                s.close().await;
                // Give the peer a moment to read what was flushed.
                let _ = tokio::time::timeout(std::time::Duration::from_secs(5), s.closed()).await;
            }
            Conn::Ws(w, reader) => {
                w.close().await;
                let _ = tokio::time::timeout(std::time::Duration::from_secs(5), reader).await;
            }
        }
    }

    /// Resolves when the client has gone away.
    pub async fn gone(&mut self) {
        match self {
            Conn::Spdy(s) => s.closed().await,
            Conn::Ws(_, reader) => {
                while !reader.is_finished() {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
            }
        }
    }
}

/// The streams of an exec or attach session.
pub struct Streams {
    pub stdin: Option<mpsc::Receiver<Bytes>>,
    pub resize: Option<mpsc::Receiver<Bytes>>,
    pub stdout: Option<Sink>,
    pub stderr: Option<Sink>,
    pub error: Sink,
    /// The Status travels as JSON (v4 and later) rather than as text.
    pub status_json: bool,
    pub conn: Conn,
}
