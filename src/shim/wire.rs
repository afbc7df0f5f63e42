//! Framing of the shim API: a 4-byte big-endian length, then a protobuf
//! message (proto/husk/v1/shim.proto). Blocking std I/O on both sides.

use prost::Message;
use std::io::{self, Read, Write};

/// An ExecSync's output kept per stream unless the request says otherwise.
pub const DEFAULT_MAX_OUTPUT: usize = 16 << 20;

/// Largest frame accepted: an ExecSync answer carries up to 16 MiB of
/// stdout and 16 MiB of stderr (as containerd returns them); everything
/// else is small.
pub const MAX_FRAME: usize = (2 * DEFAULT_MAX_OUTPUT) + (64 << 10);

pub fn write_msg<M: Message>(w: &mut impl Write, m: &M) -> io::Result<()> {
    let body = m.encode_to_vec();
    let len = u32::try_from(body.len()).map_err(|_| io::Error::other("frame too large"))?;
    let mut buf = Vec::with_capacity(4 + body.len());
    buf.extend_from_slice(&len.to_be_bytes());
    buf.extend_from_slice(&body);
    w.write_all(&buf)?;
    w.flush()
}

pub fn read_msg<M: Message + Default>(r: &mut impl Read) -> io::Result<M> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "frame too large",
        ));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    M::decode(body.as_slice()).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::shim::{shim_request::Request, ShimRequest, StartRequest};

    #[test]
    fn round_trip() {
        let req = ShimRequest {
            request: Some(Request::Start(StartRequest { id: "c1".into() })),
            ..Default::default()
        };
        let mut buf = Vec::new();
        write_msg(&mut buf, &req).expect("write");
        let back: ShimRequest = read_msg(&mut buf.as_slice()).expect("read");
        assert_eq!(back, req);
        let huge = (u32::MAX).to_be_bytes();
        assert!(read_msg::<ShimRequest>(&mut huge.as_slice()).is_err());
    }
}
