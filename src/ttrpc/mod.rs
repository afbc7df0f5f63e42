//! ttrpc's wire, shared by its two users: NRI's plugins (`nri/ttrpc.rs`,
//! over NRI's multiplexed trunk) and containerd's shim v2 runtimes
//! (`shim/v2`, over a plain unix socket). A frame is `[length u32
//! BE][stream id u32 BE][type u8][flags u8]` then a protobuf [`Request`]
//! (type 1) or [`Response`] (type 2).

use prost::Message;

/// The bytes of a frame's header.
pub const TTRPC_HEADER: usize = 10;
/// ttrpc's largest message.
pub const MAX_MESSAGE: usize = 4 << 20;
pub const TYPE_REQUEST: u8 = 1;
pub const TYPE_RESPONSE: u8 = 2;

/// ttrpc's request envelope.
#[derive(Clone, PartialEq, Message)]
pub struct Request {
    #[prost(string, tag = "1")]
    pub service: String,
    #[prost(string, tag = "2")]
    pub method: String,
    #[prost(bytes = "vec", tag = "3")]
    pub payload: Vec<u8>,
    #[prost(int64, tag = "4")]
    pub timeout_nano: i64,
    /// gRPC-style metadata (containerd's namespace rides here).
    #[prost(message, repeated, tag = "5")]
    pub metadata: Vec<KeyValue>,
}

/// One metadata entry.
#[derive(Clone, PartialEq, Message)]
pub struct KeyValue {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

/// ttrpc's response envelope.
#[derive(Clone, PartialEq, Message)]
pub struct Response {
    #[prost(message, optional, tag = "1")]
    pub status: Option<Status>,
    #[prost(bytes = "vec", tag = "2")]
    pub payload: Vec<u8>,
}

/// google.rpc.Status, without details.
#[derive(Clone, PartialEq, Message)]
pub struct Status {
    #[prost(int32, tag = "1")]
    pub code: i32,
    #[prost(string, tag = "2")]
    pub message: String,
}

/// The next whole ttrpc frame of `buf`, taken out of it.
pub fn take_frame(buf: &mut Vec<u8>) -> Result<Option<(u32, u8, Vec<u8>)>, String> {
    if buf.len() < TTRPC_HEADER {
        return Ok(None);
    }
    let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if len > MAX_MESSAGE {
        return Err(format!("a ttrpc message of {len} bytes, over its limit"));
    }
    if buf.len() < TTRPC_HEADER + len {
        return Ok(None);
    }
    let id = u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]);
    let kind = buf[8];
    let body = buf[TTRPC_HEADER..TTRPC_HEADER + len].to_vec();
    buf.drain(..TTRPC_HEADER + len);
    Ok(Some((id, kind, body)))
}

/// One frame: its header, then `body`.
pub fn encode_frame(id: u32, kind: u8, body: &[u8]) -> Result<Vec<u8>, String> {
    if body.len() > MAX_MESSAGE {
        return Err(format!(
            "a message of {} bytes, over ttrpc's limit",
            body.len()
        ));
    }
    let mut frame = Vec::with_capacity(TTRPC_HEADER + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&id.to_be_bytes());
    frame.push(kind);
    frame.push(0);
    frame.extend_from_slice(body);
    Ok(frame)
}
