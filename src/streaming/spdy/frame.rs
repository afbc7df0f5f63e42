//! SPDY/3.1 frames as Kubernetes' httpstream uses them (moby/spdystream on
//! the Go side): the 8-byte frame header, the control frames SYN_STREAM,
//! SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS and
//! WINDOW_UPDATE, data frames, and name/value header blocks compressed with
//! one zlib stream per direction primed with the SPDY/3 dictionary.
//!
//! Invariants: header names go out lowercased; each header block is
//! compressed with a sync flush so the peer can decode it on its own; the
//! compressor and the decompressor live as long as the connection.

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress};
use std::io;
use std::sync::OnceLock;
use tokio::io::{AsyncRead, AsyncReadExt};

pub const VERSION: u16 = 3;
pub const FLAG_FIN: u8 = 0x01;
pub const FLAG_UNIDIRECTIONAL: u8 = 0x02;
/// Largest frame payload accepted from a peer.
pub const MAX_FRAME: usize = 16 << 20;

const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const SETTINGS: u16 = 4;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
const HEADERS: u16 = 8;
const WINDOW_UPDATE: u16 = 9;

/// RST_STREAM status codes used here.
pub const RST_PROTOCOL_ERROR: u32 = 1;
pub const RST_REFUSED: u32 = 3;
pub const RST_CANCEL: u32 = 5;

/// Header name/value pairs; names lowercase, repeated values kept apart.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Headers(pub Vec<(String, String)>);

impl Headers {
    pub fn new() -> Headers {
        Headers(Vec::new())
    }

    pub fn with(mut self, name: &str, value: &str) -> Headers {
        self.0.push((name.to_ascii_lowercase(), value.to_string()));
        self
    }

    /// The first value of `name` (case-insensitive).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    Data {
        stream: u32,
        fin: bool,
        data: bytes::Bytes,
    },
    SynStream {
        stream: u32,
        associated: u32,
        priority: u8,
        flags: u8,
        headers: Headers,
    },
    SynReply {
        stream: u32,
        flags: u8,
        headers: Headers,
    },
    RstStream {
        stream: u32,
        status: u32,
    },
    Settings,
    Ping(u32),
    GoAway {
        last_good: u32,
        status: u32,
    },
    HeadersFrame {
        stream: u32,
        flags: u8,
        headers: Headers,
    },
    WindowUpdate {
        stream: u32,
        delta: u32,
    },
    /// A control frame type this side does not know; ignored.
    Unknown(u16),
}

/// The SPDY/3 header compression dictionary (draft 3, section 2.6.10.1):
/// length-prefixed words, then a run of common header values.
pub fn dictionary() -> &'static [u8] {
    static DICT: OnceLock<Vec<u8>> = OnceLock::new();
    DICT.get_or_init(|| {
        const WORDS: &[&str] = &[
            "options",
            "head",
            "post",
            "put",
            "delete",
            "trace",
            "accept",
            "accept-charset",
            "accept-encoding",
            "accept-language",
            "accept-ranges",
            "age",
            "allow",
            "authorization",
            "cache-control",
            "connection",
            "content-base",
            "content-encoding",
            "content-language",
            "content-length",
            "content-location",
            "content-md5",
            "content-range",
            "content-type",
            "date",
            "etag",
            "expect",
            "expires",
            "from",
            "host",
            "if-match",
            "if-modified-since",
            "if-none-match",
            "if-range",
            "if-unmodified-since",
            "last-modified",
            "location",
            "max-forwards",
            "pragma",
            "proxy-authenticate",
            "proxy-authorization",
            "range",
            "referer",
            "retry-after",
            "server",
            "te",
            "trailer",
            "transfer-encoding",
            "upgrade",
            "user-agent",
            "vary",
            "via",
            "warning",
            "www-authenticate",
            "method",
            "get",
            "status",
            "200 OK",
            "version",
            "HTTP/1.1",
            "url",
            "public",
            "set-cookie",
            "keep-alive",
            "origin",
        ];
        const TAIL: &str = concat!(
            "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505",
            "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request",
            "401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented",
            "503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 ",
            "Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,image/jpg,image/gif,",
            "application/xml,application/xhtml+xml,text/plain,text/javascript,publicprivatemax-age=",
            "gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0."
        );
        let mut d = Vec::with_capacity(1424);
        for w in WORDS {
            d.extend_from_slice(&(w.len() as u32).to_be_bytes());
            d.extend_from_slice(w.as_bytes());
        }
        d.extend_from_slice(TAIL.as_bytes());
        d
    })
}

/// The sending side's header compressor (one zlib stream per connection).
pub struct HeaderEncoder {
    z: Compress,
}

impl HeaderEncoder {
    pub fn new() -> io::Result<HeaderEncoder> {
        let mut z = Compress::new(Compression::default(), true);
        z.set_dictionary(dictionary())
            .map_err(|e| io::Error::other(format!("spdy header dictionary: {e}")))?;
        Ok(HeaderEncoder { z })
    }

    /// Appends the compressed block for `h` to `out`.
    pub fn encode(&mut self, h: &Headers, out: &mut Vec<u8>) -> io::Result<()> {
        let mut plain = Vec::with_capacity(64);
        plain.extend_from_slice(&(h.0.len() as u32).to_be_bytes());
        for (n, v) in &h.0 {
            let n = n.to_ascii_lowercase();
            plain.extend_from_slice(&(n.len() as u32).to_be_bytes());
            plain.extend_from_slice(n.as_bytes());
            plain.extend_from_slice(&(v.len() as u32).to_be_bytes());
            plain.extend_from_slice(v.as_bytes());
        }
        let mut input = plain.as_slice();
        loop {
            out.reserve(input.len() + 128);
            let before_in = self.z.total_in();
            self.z
                .compress_vec(input, out, FlushCompress::Sync)
                .map_err(|e| io::Error::other(format!("spdy header compression: {e}")))?;
            input = &input[(self.z.total_in() - before_in) as usize..];
            // All input taken and room left over: the flush is complete.
            if input.is_empty() && out.len() < out.capacity() {
                return Ok(());
            }
        }
    }
}

/// The receiving side's header decompressor.
pub struct HeaderDecoder {
    z: Decompress,
}

impl HeaderDecoder {
    pub fn new() -> HeaderDecoder {
        HeaderDecoder {
            z: Decompress::new(true),
        }
    }

    pub fn decode(&mut self, block: &[u8]) -> io::Result<Headers> {
        let bad = |m: String| io::Error::new(io::ErrorKind::InvalidData, m);
        let mut plain: Vec<u8> = Vec::with_capacity(block.len() * 4 + 256);
        let mut input = block;
        loop {
            if plain.len() > MAX_FRAME {
                return Err(bad("spdy header block too large".into()));
            }
            plain.reserve(1024);
            let (before_in, before_out) = (self.z.total_in(), self.z.total_out());
            match self
                .z
                .decompress_vec(input, &mut plain, FlushDecompress::Sync)
            {
                Ok(_) if self.z.total_in() == before_in && self.z.total_out() == before_out => {
                    // Input left that zlib takes no more of (bytes after the
                    // stream's end): an error, not a loop (found by the
                    // spdy_frames fuzz target: 16 bytes hung the reader).
                    if !input.is_empty() {
                        return Err(bad("spdy header block: bytes zlib does not take".into()));
                    }
                }
                Ok(_) => {}
                Err(e) if e.needs_dictionary().is_some() => {
                    self.z
                        .set_dictionary(dictionary())
                        .map_err(|e| bad(format!("spdy header dictionary: {e}")))?;
                }
                Err(e) => return Err(bad(format!("spdy header block: {e}"))),
            }
            input = &input[(self.z.total_in() - before_in) as usize..];
            if input.is_empty() && plain.len() < plain.capacity() {
                break;
            }
        }
        parse_block(&plain).ok_or_else(|| bad("malformed spdy header block".into()))
    }
}

impl Default for HeaderDecoder {
    fn default() -> Self {
        HeaderDecoder::new()
    }
}

fn parse_block(b: &[u8]) -> Option<Headers> {
    let mut pos = 0usize;
    let mut take = |n: usize| -> Option<&[u8]> {
        let s = b.get(pos..pos.checked_add(n)?)?;
        pos += n;
        Some(s)
    };
    let u32_at = |s: &[u8]| u32::from_be_bytes([s[0], s[1], s[2], s[3]]) as usize;
    let count = u32_at(take(4)?);
    let mut h = Headers::new();
    for _ in 0..count {
        let nl = u32_at(take(4)?);
        let name = String::from_utf8_lossy(take(nl)?).to_ascii_lowercase();
        let vl = u32_at(take(4)?);
        let value = String::from_utf8_lossy(take(vl)?).into_owned();
        // Several values of one name are joined with NUL.
        for v in value.split('\0') {
            h.0.push((name.clone(), v.to_string()));
        }
    }
    Some(h)
}

fn control_header(out: &mut Vec<u8>, kind: u16, flags: u8, len: usize) {
    out.extend_from_slice(&(0x8000u16 | VERSION).to_be_bytes());
    out.extend_from_slice(&kind.to_be_bytes());
    out.push(flags);
    out.extend_from_slice(&(len as u32).to_be_bytes()[1..]);
}

/// Serializes `f` onto `out`.
pub fn encode(f: &Frame, enc: &mut HeaderEncoder, out: &mut Vec<u8>) -> io::Result<()> {
    match f {
        Frame::Data { stream, fin, data } => {
            out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
            out.push(if *fin { FLAG_FIN } else { 0 });
            out.extend_from_slice(&(data.len() as u32).to_be_bytes()[1..]);
            out.extend_from_slice(data);
        }
        Frame::SynStream {
            stream,
            associated,
            priority,
            flags,
            headers,
        } => {
            let mut block = Vec::new();
            enc.encode(headers, &mut block)?;
            control_header(out, SYN_STREAM, *flags, 10 + block.len());
            out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
            out.extend_from_slice(&(associated & 0x7fff_ffff).to_be_bytes());
            out.push((priority & 0x7) << 5);
            out.push(0);
            out.extend_from_slice(&block);
        }
        Frame::SynReply {
            stream,
            flags,
            headers,
        }
        | Frame::HeadersFrame {
            stream,
            flags,
            headers,
        } => {
            let kind = if matches!(f, Frame::SynReply { .. }) {
                SYN_REPLY
            } else {
                HEADERS
            };
            let mut block = Vec::new();
            enc.encode(headers, &mut block)?;
            control_header(out, kind, *flags, 4 + block.len());
            out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
            out.extend_from_slice(&block);
        }
        Frame::RstStream { stream, status } => {
            control_header(out, RST_STREAM, 0, 8);
            out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
            out.extend_from_slice(&status.to_be_bytes());
        }
        Frame::Settings => {
            control_header(out, SETTINGS, 0, 4);
            out.extend_from_slice(&0u32.to_be_bytes());
        }
        Frame::Ping(id) => {
            control_header(out, PING, 0, 4);
            out.extend_from_slice(&id.to_be_bytes());
        }
        Frame::GoAway { last_good, status } => {
            control_header(out, GOAWAY, 0, 8);
            out.extend_from_slice(&(last_good & 0x7fff_ffff).to_be_bytes());
            out.extend_from_slice(&status.to_be_bytes());
        }
        Frame::WindowUpdate { stream, delta } => {
            control_header(out, WINDOW_UPDATE, 0, 8);
            out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
            out.extend_from_slice(&(delta & 0x7fff_ffff).to_be_bytes());
        }
        Frame::Unknown(_) => {}
    }
    Ok(())
}

fn be32(b: &[u8], at: usize) -> io::Result<u32> {
    b.get(at..at + 4)
        .map(|s| u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "short spdy frame"))
}

/// Reads one frame; `Ok(None)` at a clean end of the connection.
pub async fn read<R: AsyncRead + Unpin>(
    r: &mut R,
    dec: &mut HeaderDecoder,
) -> io::Result<Option<Frame>> {
    let mut head = [0u8; 8];
    match r.read_exact(&mut head).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let flags = head[4];
    let len = u32::from_be_bytes([0, head[5], head[6], head[7]]) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("spdy frame of {len} bytes is too large"),
        ));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).await?;
    if head[0] & 0x80 == 0 {
        let stream = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) & 0x7fff_ffff;
        return Ok(Some(Frame::Data {
            stream,
            fin: flags & FLAG_FIN != 0,
            data: body.into(),
        }));
    }
    let version = u16::from_be_bytes([head[0], head[1]]) & 0x7fff;
    if version != VERSION {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("spdy version {version} is not supported"),
        ));
    }
    let kind = u16::from_be_bytes([head[2], head[3]]);
    let b = body.as_slice();
    Ok(Some(match kind {
        SYN_STREAM => {
            let stream = be32(b, 0)? & 0x7fff_ffff;
            let associated = be32(b, 4)? & 0x7fff_ffff;
            let priority = b.get(8).copied().unwrap_or(0) >> 5;
            let headers = dec.decode(b.get(10..).unwrap_or_default())?;
            Frame::SynStream {
                stream,
                associated,
                priority,
                flags,
                headers,
            }
        }
        SYN_REPLY | HEADERS => {
            let stream = be32(b, 0)? & 0x7fff_ffff;
            let headers = dec.decode(b.get(4..).unwrap_or_default())?;
            if kind == SYN_REPLY {
                Frame::SynReply {
                    stream,
                    flags,
                    headers,
                }
            } else {
                Frame::HeadersFrame {
                    stream,
                    flags,
                    headers,
                }
            }
        }
        RST_STREAM => Frame::RstStream {
            stream: be32(b, 0)? & 0x7fff_ffff,
            status: be32(b, 4)?,
        },
        SETTINGS => Frame::Settings,
        PING => Frame::Ping(be32(b, 0)?),
        GOAWAY => Frame::GoAway {
            last_good: be32(b, 0)? & 0x7fff_ffff,
            status: be32(b, 4).unwrap_or(0),
        },
        WINDOW_UPDATE => Frame::WindowUpdate {
            stream: be32(b, 0)? & 0x7fff_ffff,
            delta: be32(b, 4)? & 0x7fff_ffff,
        },
        other => Frame::Unknown(other),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dictionary_has_the_spec_length() {
        assert_eq!(dictionary().len(), 1423);
        assert!(dictionary().starts_with(b"\0\0\0\x07options"));
        assert!(dictionary().ends_with(b"enq=0."));
    }

    #[test]
    fn bytes_after_the_zlib_stream_end_are_an_error_not_a_hang() {
        // The spdy_frames fuzz target's timeout input.
        let block = b"x\x01\x03\x00\x00\x00\x00\x01zY%\x00E}\xa2\x00";
        assert!(HeaderDecoder::new().decode(block).is_err());
    }

    #[tokio::test]
    async fn frames_round_trip_with_one_zlib_stream() {
        let mut enc = HeaderEncoder::new().expect("encoder");
        let mut dec = HeaderDecoder::new();
        let frames = vec![
            Frame::SynStream {
                stream: 1,
                associated: 0,
                priority: 0,
                flags: 0,
                headers: Headers::new()
                    .with("streamType", "error")
                    .with("port", "80"),
            },
            Frame::SynReply {
                stream: 1,
                flags: 0,
                headers: Headers::new(),
            },
            Frame::Data {
                stream: 1,
                fin: true,
                data: bytes::Bytes::from_static(b"hello"),
            },
            Frame::SynStream {
                stream: 3,
                associated: 0,
                priority: 0,
                flags: FLAG_FIN,
                headers: Headers::new().with("streamtype", "stdout"),
            },
            Frame::Ping(7),
            Frame::RstStream {
                stream: 3,
                status: RST_CANCEL,
            },
            Frame::GoAway {
                last_good: 3,
                status: 0,
            },
            Frame::WindowUpdate {
                stream: 1,
                delta: 100,
            },
        ];
        let mut wire = Vec::new();
        for f in &frames {
            encode(f, &mut enc, &mut wire).expect("encode");
        }
        let mut r = wire.as_slice();
        for want in &frames {
            let got = read(&mut r, &mut dec).await.expect("read").expect("frame");
            assert_eq!(&got, want);
        }
        assert!(read(&mut r, &mut dec).await.expect("eof").is_none());
        let h = Headers::new().with("streamType", "error");
        assert_eq!(h.get("STREAMTYPE"), Some("error"));
    }
}
