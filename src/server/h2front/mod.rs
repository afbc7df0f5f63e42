//! A lenient HTTP/2 front on the CRI socket, so every gRPC client reaches
//! husk whatever `:authority` it sends.
//!
//! grpc-go dialled with a bare socket path (the kubelet up to 1.30), the
//! gRPC C core (grpc-python) and grpc-java send the socket path, or a
//! percent-encoded form of it, as `:authority`. The HTTP/2 layer under tonic
//! rejects such a value as a malformed URI authority and resets the stream
//! with PROTOCOL_ERROR before any handler runs. containerd and CRI-O accept
//! them; so does husk, through this front.
//!
//! [`FrontStream`] wraps each accepted unix connection. Bytes from the
//! client go through a [`rewrite::Rewriter`] until its first header block:
//! a connection whose `:authority` is fine is then read straight through
//! (no copy, no parsing); one whose `:authority` is a socket path has every
//! header block re-encoded with `localhost` in its place, other frames
//! untouched. Bytes to the client are written straight through. It runs
//! inline in the connection's own reads: no extra task, no extra socket, no
//! proxy for the operator to run.

pub mod rewrite;

use rewrite::Rewriter;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::UnixStream;

/// How much is read from the socket at once.
const READ_CHUNK: usize = 16 * 1024;

/// One client connection seen through the front.
pub struct FrontStream {
    io: UnixStream,
    rw: Rewriter,
    raw: Box<[u8]>,
    out: Vec<u8>,
    pos: usize,
    logged: bool,
}

impl FrontStream {
    /// Wraps a freshly accepted connection.
    pub fn new(io: UnixStream) -> Self {
        FrontStream {
            io,
            rw: Rewriter::new(),
            raw: vec![0; READ_CHUNK].into_boxed_slice(),
            out: Vec::new(),
            pos: 0,
            logged: false,
        }
    }
}

impl AsyncRead for FrontStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.pos >= this.out.len() && this.rw.mode() == rewrite::Mode::Passthrough {
            // Nothing to filter any more: the socket reads straight into
            // the HTTP/2 layer's buffer.
            return Pin::new(&mut this.io).poll_read(cx, buf);
        }
        loop {
            if this.pos < this.out.len() {
                let n = buf.remaining().min(this.out.len() - this.pos);
                buf.put_slice(&this.out[this.pos..this.pos + n]);
                this.pos += n;
                if this.pos == this.out.len() {
                    this.out.clear();
                    this.pos = 0;
                }
                return Poll::Ready(Ok(()));
            }
            let mut rb = ReadBuf::new(&mut this.raw);
            ready!(Pin::new(&mut this.io).poll_read(cx, &mut rb))?;
            let got = rb.filled();
            if got.is_empty() {
                return Poll::Ready(Ok(()));
            }
            if let Err(e) = this.rw.feed(got, &mut this.out) {
                tracing::warn!(error = %e, "closing a CRI connection: malformed HTTP/2 from the client");
                return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, e)));
            }
            if !this.logged && this.rw.rewritten() > 0 {
                this.logged = true;
                tracing::debug!(
                    "client sent a non-URI :authority (a socket path); serving it as localhost"
                );
            }
        }
    }
}

impl AsyncWrite for FrontStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

impl tonic::transport::server::Connected for FrontStream {
    type ConnectInfo = <UnixStream as tonic::transport::server::Connected>::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}
