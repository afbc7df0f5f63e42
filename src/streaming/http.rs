//! The HTTP/1.1 part of the streaming endpoints: one request head read
//! from the connection (bounded), a plain response for refusals, and the
//! `101 Switching Protocols` answers for SPDY/3.1 and WebSocket upgrades.
//! Bytes read past the head are kept so the upgraded protocol loses none.

use std::io;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Largest request or response head accepted.
const MAX_HEAD: usize = 16 * 1024;

/// A parsed request or response head.
#[derive(Debug, Clone, Default)]
pub struct Head {
    pub method: String,
    pub path: String,
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// Bytes that followed the head on the connection.
    pub rest: Vec<u8>,
}

impl Head {
    /// The first value of `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim())
    }

    /// Every comma-separated value of every `name` header, in order.
    pub fn header_list(&self, name: &str) -> Vec<String> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .flat_map(|(_, v)| v.split(','))
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect()
    }

    /// `Connection` lists `upgrade` and `Upgrade` is `proto`.
    pub fn upgrades_to(&self, proto: &str) -> bool {
        self.header_list("connection")
            .iter()
            .any(|t| t.eq_ignore_ascii_case("upgrade"))
            && self
                .header("upgrade")
                .is_some_and(|u| u.eq_ignore_ascii_case(proto))
    }
}

async fn read_head<R: AsyncRead + Unpin>(r: &mut R) -> io::Result<(Vec<u8>, usize)> {
    let mut buf = Vec::with_capacity(2048);
    let mut chunk = [0u8; 2048];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Ok((buf, end + 4));
        }
        if buf.len() > MAX_HEAD {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "http head too large",
            ));
        }
        let n = r.read(&mut chunk).await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed before the http head ended",
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn bad(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("bad http head: {e}"))
}

fn collect(headers: &[httparse::Header<'_>]) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|h| {
            (
                h.name.to_string(),
                String::from_utf8_lossy(h.value).into_owned(),
            )
        })
        .collect()
}

pub async fn read_request<R: AsyncRead + Unpin>(r: &mut R) -> io::Result<Head> {
    let (buf, end) = read_head(r).await?;
    let mut hs = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut hs);
    req.parse(&buf[..end]).map_err(bad)?;
    Ok(Head {
        method: req.method.unwrap_or("").to_string(),
        path: req.path.unwrap_or("").to_string(),
        status: 0,
        headers: collect(req.headers),
        rest: buf[end..].to_vec(),
    })
}

pub async fn read_response<R: AsyncRead + Unpin>(r: &mut R) -> io::Result<Head> {
    let (buf, end) = read_head(r).await?;
    let mut hs = [httparse::EMPTY_HEADER; 64];
    let mut resp = httparse::Response::new(&mut hs);
    resp.parse(&buf[..end]).map_err(bad)?;
    Ok(Head {
        status: resp.code.unwrap_or(0),
        headers: collect(resp.headers),
        rest: buf[end..].to_vec(),
        ..Default::default()
    })
}

/// Writes a complete plain-text response and shuts the write side.
pub async fn respond<W: AsyncWrite + Unpin>(
    w: &mut W,
    status: u16,
    reason: &str,
    extra: &[(&str, String)],
    body: &str,
) -> io::Result<()> {
    let mut s = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len() + 1
    );
    for (k, v) in extra {
        s.push_str(&format!("{k}: {v}\r\n"));
    }
    s.push_str("\r\n");
    s.push_str(body);
    s.push('\n');
    w.write_all(s.as_bytes()).await?;
    w.flush().await?;
    let _ = w.shutdown().await;
    Ok(())
}

/// Writes `101 Switching Protocols` with the given headers.
pub async fn switching<W: AsyncWrite + Unpin>(
    w: &mut W,
    headers: &[(&str, String)],
) -> io::Result<()> {
    let mut s = String::from("HTTP/1.1 101 Switching Protocols\r\n");
    for (k, v) in headers {
        s.push_str(&format!("{k}: {v}\r\n"));
    }
    s.push_str("\r\n");
    w.write_all(s.as_bytes()).await?;
    w.flush().await
}

/// A stream that first yields bytes already read, then the inner stream.
pub struct Prefixed<S> {
    pre: Vec<u8>,
    pos: usize,
    inner: S,
}

impl<S> Prefixed<S> {
    pub fn new(pre: Vec<u8>, inner: S) -> Prefixed<S> {
        Prefixed { pre, pos: 0, inner }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        if self.pos < self.pre.len() {
            let n = (self.pre.len() - self.pos).min(buf.remaining());
            let start = self.pos;
            buf.put_slice(&self.pre[start..start + n]);
            self.pos += n;
            return std::task::Poll::Ready(Ok(()));
        }
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
