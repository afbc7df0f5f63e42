//! Descriptors across the shim socket: a framed answer (wire.rs framing)
//! sent with SCM_RIGHTS on its first bytes, and its receiving side, which
//! takes the descriptors and then reads the rest of the frame. Received
//! descriptors are close-on-exec.

use super::wire::read_msg;
use crate::api::shim::ShimResponse;
use prost::Message;
use std::io::{self, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

const MAX_FDS: usize = 8;

/// Writes `msg` as one frame with `fds` attached.
pub fn send(conn: &mut UnixStream, msg: &ShimResponse, fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    let body = msg.encode_to_vec();
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut anc = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !anc.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::other("too many descriptors to pass"));
    }
    let n = rustix::net::sendmsg(
        &*conn,
        &[io::IoSlice::new(&frame)],
        &mut anc,
        SendFlags::NOSIGNAL,
    )?;
    conn.write_all(&frame[n..])?;
    conn.flush()
}

/// Reads one frame and the descriptors that came with it.
pub fn recv(conn: &mut UnixStream) -> io::Result<(ShimResponse, Vec<OwnedFd>)> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    let mut first = [0u8; 4];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut anc = RecvAncillaryBuffer::new(&mut space);
    let r = rustix::net::recvmsg(
        &*conn,
        &mut [io::IoSliceMut::new(&mut first)],
        &mut anc,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    let mut fds = Vec::new();
    for m in anc.drain() {
        if let RecvAncillaryMessage::ScmRights(it) = m {
            fds.extend(it);
        }
    }
    if r.bytes == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the shim closed the connection",
        ));
    }
    conn.read_exact(&mut first[r.bytes..])?;
    // Re-assemble the frame: its length, then the body.
    let len = u32::from_be_bytes(first) as usize;
    let mut body = vec![0u8; len];
    conn.read_exact(&mut body)?;
    let mut framed = Vec::with_capacity(4 + len);
    framed.extend_from_slice(&first);
    framed.extend_from_slice(&body);
    let msg = read_msg::<ShimResponse>(&mut framed.as_slice())?;
    Ok((msg, fds))
}
