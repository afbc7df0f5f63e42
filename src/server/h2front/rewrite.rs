//! The sans-IO half of the HTTP/2 front: a client-to-server byte filter that
//! re-encodes every header block and replaces an `:authority` that is not a
//! valid URI authority (a socket path, a percent-encoded path, an empty
//! value) with `localhost`, the value grpc-go sends for `unix://` targets.
//!
//! A connection is judged by its first header block. When that block's
//! `:authority` is acceptable (tonic, grpc-go with `unix://`, crictl, newer
//! kubelets), the block and everything after it pass through untouched:
//! such clients pay nothing but one decode. When it is not (kubelet ≤ 1.30,
//! the gRPC C core), the connection is rewritten to its end:
//!
//! - Bytes outside HEADERS/CONTINUATION frames pass through unchanged and in
//!   order; frame boundaries are never merged or split except for header
//!   blocks.
//! - Every header block is decoded with one HPACK decoder kept per
//!   connection (so the client's dynamic table is honoured) and re-emitted as
//!   literals *without indexing*: the server's decoder table is never used,
//!   so the two sides can never disagree about it.
//! - A re-emitted block is split into a HEADERS frame and CONTINUATION frames
//!   of at most 16,384 bytes (the HTTP/2 minimum every peer accepts);
//!   padding is dropped, a priority field is kept.
//! - Input is bounded: a header block over [`MAX_BLOCK`] bytes, a frame that
//!   interleaves a header block, or an undecodable block is an error, and the
//!   caller closes the connection.

use loona_hpack::Decoder;
use std::borrow::Cow;

/// The HTTP/2 client connection preface.
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// The largest header block (all its fragments) accepted.
pub const MAX_BLOCK: usize = 1 << 20;
/// The size re-emitted header frames are cut at.
const OUT_FRAME: usize = 16_384;
/// What a rejected authority is replaced with.
pub const REPLACEMENT: &[u8] = b"localhost";

const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

/// Why a connection is refused by the front.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrontError {
    #[error("header block on stream {0} is over {MAX_BLOCK} bytes")]
    BlockTooLarge(u32),
    #[error(
        "frame type {kind:#x} on stream {got} while the header block of stream {want} is open"
    )]
    Interleaved { kind: u8, got: u32, want: u32 },
    #[error("CONTINUATION frame on stream {0} with no open header block")]
    StrayContinuation(u32),
    #[error("HEADERS frame on stream {0} has bad padding or priority fields")]
    BadHeadersFrame(u32),
    #[error("header block on stream {stream}: {reason}")]
    Hpack { stream: u32, reason: String },
}

/// An open header block awaiting CONTINUATION frames.
struct Block {
    stream: u32,
    end_stream: bool,
    priority: Option<[u8; 5]>,
    fragment: Vec<u8>,
    /// The block's frames as received (for a connection passed through).
    raw: Vec<u8>,
}

/// What the front does with a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// No header block seen yet.
    Undecided,
    /// Every header block is re-encoded.
    Rewrite,
    /// Everything passes untouched.
    Passthrough,
}

/// The client-to-server filter of one connection.
pub struct Rewriter {
    preface_left: usize,
    passthrough_left: usize,
    pending: Vec<u8>,
    block: Option<Block>,
    decoder: Decoder<'static>,
    rewritten: u64,
    mode: Mode,
}

impl Default for Rewriter {
    fn default() -> Self {
        Self::new()
    }
}

impl Rewriter {
    /// A filter for a fresh connection (expects the preface first).
    pub fn new() -> Self {
        Rewriter {
            preface_left: PREFACE.len(),
            passthrough_left: 0,
            pending: Vec::new(),
            block: None,
            decoder: Decoder::new(),
            rewritten: 0,
            mode: Mode::Undecided,
        }
    }

    /// What the front does with this connection so far.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// How many `:authority` values this connection has had replaced.
    pub fn rewritten(&self) -> u64 {
        self.rewritten
    }

    /// Consumes `input` and appends what the server must see to `out`.
    /// Partial frames are kept until the rest arrives.
    pub fn feed(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> Result<(), FrontError> {
        while !input.is_empty() {
            if self.mode == Mode::Passthrough {
                out.extend_from_slice(input);
                return Ok(());
            }
            if self.preface_left > 0 {
                let n = self.preface_left.min(input.len());
                out.extend_from_slice(&input[..n]);
                self.preface_left -= n;
                input = &input[n..];
                continue;
            }
            if self.passthrough_left > 0 {
                let n = self.passthrough_left.min(input.len());
                out.extend_from_slice(&input[..n]);
                self.passthrough_left -= n;
                input = &input[n..];
                continue;
            }
            // A frame header, and for header frames the whole payload.
            let need_header = 9usize.saturating_sub(self.pending.len());
            if need_header > 0 {
                let n = need_header.min(input.len());
                self.pending.extend_from_slice(&input[..n]);
                input = &input[n..];
                if self.pending.len() < 9 {
                    return Ok(());
                }
            }
            let h = &self.pending[..9];
            let len = (usize::from(h[0]) << 16) | (usize::from(h[1]) << 8) | usize::from(h[2]);
            let kind = h[3];
            let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
            if kind != HEADERS && kind != CONTINUATION {
                if let Some(b) = &self.block {
                    return Err(FrontError::Interleaved {
                        kind,
                        got: stream,
                        want: b.stream,
                    });
                }
                out.extend_from_slice(&self.pending);
                self.pending.clear();
                self.passthrough_left = len;
                continue;
            }
            let open = self.block.as_ref().map_or(0, |b| b.fragment.len());
            if len > MAX_BLOCK || open + len > MAX_BLOCK {
                return Err(FrontError::BlockTooLarge(stream));
            }
            let have = self.pending.len() - 9;
            let n = (len - have).min(input.len());
            self.pending.extend_from_slice(&input[..n]);
            input = &input[n..];
            if self.pending.len() < 9 + len {
                return Ok(());
            }
            let frame = std::mem::take(&mut self.pending);
            self.header_frame(kind, frame[4], stream, &frame, out)?;
        }
        Ok(())
    }

    /// Takes one whole HEADERS or CONTINUATION frame (`frame`, header
    /// included).
    fn header_frame(
        &mut self,
        kind: u8,
        flags: u8,
        stream: u32,
        frame: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), FrontError> {
        let payload = &frame[9..];
        if kind == CONTINUATION {
            let Some(b) = self.block.as_mut() else {
                return Err(FrontError::StrayContinuation(stream));
            };
            if b.stream != stream {
                return Err(FrontError::Interleaved {
                    kind,
                    got: stream,
                    want: b.stream,
                });
            }
            b.fragment.extend_from_slice(payload);
            if self.mode == Mode::Undecided {
                b.raw.extend_from_slice(frame);
            }
        } else {
            if let Some(b) = &self.block {
                return Err(FrontError::Interleaved {
                    kind,
                    got: stream,
                    want: b.stream,
                });
            }
            let mut p = payload;
            let mut pad = 0usize;
            if flags & PADDED != 0 {
                let (&n, rest) = p.split_first().ok_or(FrontError::BadHeadersFrame(stream))?;
                pad = usize::from(n);
                p = rest;
            }
            let mut priority = None;
            if flags & PRIORITY != 0 {
                if p.len() < 5 {
                    return Err(FrontError::BadHeadersFrame(stream));
                }
                let mut pr = [0u8; 5];
                pr.copy_from_slice(&p[..5]);
                priority = Some(pr);
                p = &p[5..];
            }
            if pad > p.len() {
                return Err(FrontError::BadHeadersFrame(stream));
            }
            self.block = Some(Block {
                stream,
                end_stream: flags & END_STREAM != 0,
                priority,
                fragment: p[..p.len() - pad].to_vec(),
                raw: if self.mode == Mode::Undecided {
                    frame.to_vec()
                } else {
                    Vec::new()
                },
            });
        }
        if flags & END_HEADERS != 0 {
            if let Some(b) = self.block.take() {
                self.emit(b, out)?;
            }
        }
        Ok(())
    }

    fn emit(&mut self, b: Block, out: &mut Vec<u8>) -> Result<(), FrontError> {
        let mut encoded = Vec::with_capacity(b.fragment.len() * 2 + 32);
        let mut replaced = false;
        self.decoder
            .decode_with_cb(&b.fragment, |name: Cow<'_, [u8]>, value: Cow<'_, [u8]>| {
                let value: &[u8] = if &*name == b":authority" && !valid_authority(&value) {
                    replaced = true;
                    REPLACEMENT
                } else {
                    &value
                };
                literal(&name, value, &mut encoded);
            })
            .map_err(|e| FrontError::Hpack {
                stream: b.stream,
                reason: e.to_string(),
            })?;
        if self.mode == Mode::Undecided {
            if !replaced {
                // A client whose authority is fine from the start: hand its
                // bytes over untouched from here on.
                self.mode = Mode::Passthrough;
                out.extend_from_slice(&b.raw);
                return Ok(());
            }
            self.mode = Mode::Rewrite;
        }
        if replaced {
            self.rewritten += 1;
        }
        let mut first = Vec::with_capacity(5 + encoded.len().min(OUT_FRAME));
        if let Some(p) = b.priority {
            first.extend_from_slice(&p);
        }
        let room = OUT_FRAME - first.len();
        let (head, mut rest) = encoded.split_at(encoded.len().min(room));
        first.extend_from_slice(head);
        let mut flags = 0;
        if b.end_stream {
            flags |= END_STREAM;
        }
        if b.priority.is_some() {
            flags |= PRIORITY;
        }
        if rest.is_empty() {
            flags |= END_HEADERS;
        }
        frame(out, HEADERS, flags, b.stream, &first);
        while !rest.is_empty() {
            let (chunk, more) = rest.split_at(rest.len().min(OUT_FRAME));
            let flags = if more.is_empty() { END_HEADERS } else { 0 };
            frame(out, CONTINUATION, flags, b.stream, chunk);
            rest = more;
        }
        Ok(())
    }
}

/// Whether the server's HTTP/2 layer accepts `v` as `:authority`.
pub fn valid_authority(v: &[u8]) -> bool {
    !v.is_empty() && http::uri::Authority::try_from(v).is_ok()
}

fn frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = payload.len();
    out.extend_from_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags]);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
}

/// An HPACK "literal header field without indexing — new name", strings
/// without Huffman coding (RFC 7541 § 6.2.2).
fn literal(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    out.push(0);
    for s in [name, value] {
        integer(s.len(), 7, out);
        out.extend_from_slice(s);
    }
}

/// An HPACK integer with an N-bit prefix whose other bits are zero
/// (RFC 7541 § 5.1).
fn integer(mut v: usize, prefix: u8, out: &mut Vec<u8>) {
    let max = (1usize << prefix) - 1;
    if v < max {
        out.push(v as u8);
        return;
    }
    out.push(max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128 + 128) as u8);
        v /= 128;
    }
    out.push(v as u8);
}

#[cfg(test)]
mod tests {
    use super::*;
    use loona_hpack::Encoder;

    fn headers_frame(flags: u8, stream: u32, block: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        frame(&mut v, HEADERS, flags, stream, block);
        v
    }

    /// Splits `out` (after the preface) into (type, flags, stream, payload).
    fn frames(mut out: &[u8]) -> Vec<(u8, u8, u32, Vec<u8>)> {
        out = &out[PREFACE.len()..];
        let mut v = Vec::new();
        while !out.is_empty() {
            let len =
                (usize::from(out[0]) << 16) | (usize::from(out[1]) << 8) | usize::from(out[2]);
            let stream = u32::from_be_bytes([out[5], out[6], out[7], out[8]]);
            v.push((out[3], out[4], stream, out[9..9 + len].to_vec()));
            out = &out[9 + len..];
        }
        v
    }

    fn request(enc: &mut Encoder<'_>, authority: &[u8]) -> Vec<u8> {
        enc.encode([
            (&b":method"[..], &b"POST"[..]),
            (b":scheme", b"http"),
            (b":path", b"/runtime.v1.RuntimeService/Version"),
            (b":authority", authority),
            (b"content-type", b"application/grpc"),
            (b"te", b"trailers"),
        ])
    }

    fn decode_all(out: &[u8]) -> Vec<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut d = Decoder::new();
        let mut blocks = Vec::new();
        let mut cur = Vec::new();
        for (kind, flags, _, p) in frames(out) {
            if kind == HEADERS || kind == CONTINUATION {
                let p = if kind == HEADERS && flags & PRIORITY != 0 {
                    &p[5..]
                } else {
                    &p[..]
                };
                cur.extend_from_slice(p);
                if flags & END_HEADERS != 0 {
                    blocks.push(d.decode(&cur).expect("decode"));
                    cur.clear();
                }
            }
        }
        blocks
    }

    #[test]
    fn a_socket_path_authority_becomes_localhost_and_the_table_is_honoured() {
        let mut enc = Encoder::new();
        let mut input = PREFACE.to_vec();
        input.extend(headers_frame(
            END_HEADERS,
            1,
            &request(&mut enc, b"/run/husk/husk.sock"),
        ));
        // The second request leans on the client's dynamic table entirely.
        input.extend(headers_frame(
            END_HEADERS,
            3,
            &request(&mut enc, b"/run/husk/husk.sock"),
        ));
        input.extend(headers_frame(
            END_HEADERS,
            5,
            &request(&mut enc, b"localhost:1234"),
        ));
        let mut out = Vec::new();
        let mut rw = Rewriter::new();
        // Byte by byte: every partial-frame path is exercised.
        for b in &input {
            rw.feed(std::slice::from_ref(b), &mut out).expect("feed");
        }
        assert!(out.starts_with(PREFACE));
        let blocks = decode_all(&out);
        assert_eq!(blocks.len(), 3);
        let auth = |b: &Vec<(Vec<u8>, Vec<u8>)>| {
            b.iter()
                .find(|(n, _)| n == b":authority")
                .map(|(_, v)| v.clone())
        };
        assert_eq!(auth(&blocks[0]).as_deref(), Some(REPLACEMENT));
        assert_eq!(auth(&blocks[1]).as_deref(), Some(REPLACEMENT));
        assert_eq!(auth(&blocks[2]).as_deref(), Some(&b"localhost:1234"[..]));
        assert_eq!(blocks[1][2].1, b"/runtime.v1.RuntimeService/Version");
        assert_eq!(rw.rewritten(), 2);
    }

    #[test]
    fn a_good_first_authority_passes_the_connection_through() {
        let mut enc = Encoder::new();
        let mut input = PREFACE.to_vec();
        let first = headers_frame(END_HEADERS, 1, &request(&mut enc, b"localhost"));
        input.extend_from_slice(&first);
        let mut data = Vec::new();
        frame(&mut data, 0x0, END_STREAM, 1, b"\0\0\0\0\x00");
        input.extend_from_slice(&data);
        input.extend(headers_frame(
            END_HEADERS,
            3,
            &request(&mut enc, b"/x.sock"),
        ));
        let mut out = Vec::new();
        let mut rw = Rewriter::new();
        for chunk in input.chunks(7) {
            rw.feed(chunk, &mut out).expect("feed");
        }
        assert_eq!(rw.mode(), Mode::Passthrough);
        assert_eq!(out, input, "byte for byte");
        assert_eq!(rw.rewritten(), 0);
    }

    #[test]
    fn empty_and_percent_encoded_authorities_are_replaced() {
        assert!(!valid_authority(b""));
        assert!(!valid_authority(b"/run/husk.sock"));
        assert!(!valid_authority(b"unix:%2Frun%2Fhusk.sock"));
        assert!(valid_authority(b"localhost"));
        assert!(valid_authority(b"127.0.0.1:80"));
    }

    #[test]
    fn data_frames_pass_through_untouched_and_padding_is_dropped() {
        let mut enc = Encoder::new();
        let block = request(&mut enc, b"");
        let mut payload = vec![3u8];
        payload.extend_from_slice(&[0, 0, 0, 0, 16]); // priority
        payload.extend_from_slice(&block);
        payload.extend_from_slice(&[0, 0, 0]); // padding
        let mut input = PREFACE.to_vec();
        input.extend(headers_frame(PADDED | PRIORITY | END_HEADERS, 1, &payload));
        let mut data = Vec::new();
        frame(&mut data, 0x0, END_STREAM, 1, b"\0\0\0\0\x05hello");
        input.extend_from_slice(&data);
        let mut out = Vec::new();
        Rewriter::new().feed(&input, &mut out).expect("feed");
        let f = frames(&out);
        assert_eq!(f[0].0, HEADERS);
        assert_eq!(f[0].1, PRIORITY | END_HEADERS);
        assert_eq!(&f[0].3[..5], &[0, 0, 0, 0, 16]);
        assert!(out.ends_with(&data));
        assert_eq!(decode_all(&out)[0][3].1, REPLACEMENT);
    }

    #[test]
    fn continuations_are_joined_and_large_blocks_split() {
        let mut enc = Encoder::new();
        let big = vec![b'x'; 40_000];
        let block = enc.encode([
            (&b":method"[..], &b"POST"[..]),
            (b":authority", b"/a/b.sock"),
            (b"x-big", &big[..]),
        ]);
        let (a, b) = block.split_at(100);
        let mut input = PREFACE.to_vec();
        input.extend(headers_frame(END_STREAM, 7, a));
        frame(&mut input, CONTINUATION, END_HEADERS, 7, b);
        let mut out = Vec::new();
        Rewriter::new().feed(&input, &mut out).expect("feed");
        let f = frames(&out);
        assert_eq!(f.len(), 3, "40 KB re-emitted in 16 KiB frames");
        assert_eq!((f[0].0, f[0].1), (HEADERS, END_STREAM));
        assert_eq!((f[2].0, f[2].1), (CONTINUATION, END_HEADERS));
        let blocks = decode_all(&out);
        assert_eq!(blocks[0][1].1, REPLACEMENT);
        assert_eq!(blocks[0][2].1, big);
    }

    #[test]
    fn hostile_frames_are_refused() {
        let mut input = PREFACE.to_vec();
        input.extend(headers_frame(0, 1, &[0x82]));
        let mut settings = Vec::new();
        frame(&mut settings, 0x4, 0, 0, &[]);
        input.extend_from_slice(&settings);
        let err = Rewriter::new()
            .feed(&input, &mut Vec::new())
            .expect_err("interleaved");
        assert!(matches!(err, FrontError::Interleaved { want: 1, .. }));

        let mut input = PREFACE.to_vec();
        frame(&mut input, CONTINUATION, END_HEADERS, 1, &[0x82]);
        let err = Rewriter::new()
            .feed(&input, &mut Vec::new())
            .expect_err("stray");
        assert_eq!(err, FrontError::StrayContinuation(1));

        let mut input = PREFACE.to_vec();
        input.extend_from_slice(&[0x20, 0, 0, HEADERS, 0, 0, 0, 0, 1]);
        let err = Rewriter::new()
            .feed(&input, &mut Vec::new())
            .expect_err("big");
        assert_eq!(err, FrontError::BlockTooLarge(1));

        let mut input = PREFACE.to_vec();
        input.extend(headers_frame(
            END_HEADERS,
            1,
            &[0xff, 0xff, 0xff, 0xff, 0x7f],
        ));
        let err = Rewriter::new()
            .feed(&input, &mut Vec::new())
            .expect_err("hpack");
        assert!(matches!(err, FrontError::Hpack { stream: 1, .. }));

        let mut input = PREFACE.to_vec();
        input.extend(headers_frame(PADDED | END_HEADERS, 1, &[9, 0x82]));
        let err = Rewriter::new()
            .feed(&input, &mut Vec::new())
            .expect_err("pad");
        assert_eq!(err, FrontError::BadHeadersFrame(1));
    }

    #[test]
    fn integers_follow_rfc7541_examples() {
        let mut v = Vec::new();
        integer(10, 5, &mut v);
        assert_eq!(v, [10]);
        v.clear();
        integer(1337, 5, &mut v);
        assert_eq!(v, [31, 154, 10]);
    }
}
