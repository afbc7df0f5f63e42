//! The D-Bus wire format, as much of it as systemd's unit calls need:
//! method calls written little-endian with strings, booleans, `u64`s,
//! arrays, structs and variants (`ssa(sv)a(sa(sv))` and the like), and
//! replies read in either byte order far enough to tell a return from an
//! error, whose reply it is, and the error's name and message.
//!
//! Alignment is counted from the start of the buffer: the header is one
//! buffer and the body another, and the body starts on an 8-byte boundary,
//! so each buffer's own offsets align as the message's would.

/// A variant's value (the `v` of a unit property).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(String),
    Bool(bool),
    U64(u64),
    Strs(Vec<String>),
}

impl Value {
    fn signature(&self) -> &'static str {
        match self {
            Value::Str(_) => "s",
            Value::Bool(_) => "b",
            Value::U64(_) => "t",
            Value::Strs(_) => "as",
        }
    }
}

/// A body or header being written.
#[derive(Default)]
pub struct Writer {
    pub buf: Vec<u8>,
}

impl Writer {
    fn pad(&mut self, align: usize) {
        while !self.buf.len().is_multiple_of(align) {
            self.buf.push(0);
        }
    }

    pub fn byte(&mut self, b: u8) {
        self.buf.push(b);
    }

    pub fn u32(&mut self, v: u32) {
        self.pad(4);
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    pub fn u64(&mut self, v: u64) {
        self.pad(8);
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    pub fn bool(&mut self, v: bool) {
        self.u32(u32::from(v));
    }

    /// A string or an object path.
    pub fn str(&mut self, s: &str) {
        self.u32(s.len() as u32);
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
    }

    pub fn signature(&mut self, s: &str) {
        self.buf.push(s.len() as u8);
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
    }

    /// An array whose elements align to `align`, written by `each`.
    pub fn array(&mut self, align: usize, each: impl FnOnce(&mut Writer)) {
        self.pad(4);
        let at = self.buf.len();
        self.buf.extend_from_slice(&[0; 4]);
        self.pad(align);
        let start = self.buf.len();
        each(self);
        let len = (self.buf.len() - start) as u32;
        self.buf[at..at + 4].copy_from_slice(&len.to_le_bytes());
    }

    pub fn struct_start(&mut self) {
        self.pad(8);
    }

    pub fn variant(&mut self, v: &Value) {
        self.signature(v.signature());
        match v {
            Value::Str(s) => self.str(s),
            Value::Bool(b) => self.bool(*b),
            Value::U64(n) => self.u64(*n),
            Value::Strs(v) => self.array(4, |w| v.iter().for_each(|s| w.str(s))),
        }
    }

    /// `a(sv)`: properties by name.
    pub fn properties(&mut self, props: &[(&str, Value)]) {
        self.array(8, |w| {
            for (name, v) in props {
                w.struct_start();
                w.str(name);
                w.variant(v);
            }
        });
    }
}

/// Header field codes.
const PATH: u8 = 1;
const INTERFACE: u8 = 2;
const MEMBER: u8 = 3;
const ERROR_NAME: u8 = 4;
const REPLY_SERIAL: u8 = 5;
const DESTINATION: u8 = 6;
const SIGNATURE: u8 = 8;

/// Message types.
pub const METHOD_RETURN: u8 = 2;
pub const ERROR: u8 = 3;

/// A method call addressed to `dest` (None on a peer-to-peer connection).
pub struct Call<'a> {
    pub dest: Option<&'a str>,
    pub path: &'a str,
    pub interface: &'a str,
    pub member: &'a str,
    pub signature: &'a str,
    pub body: Vec<u8>,
}

impl Call<'_> {
    /// The whole message with serial `serial`.
    pub fn encode(&self, serial: u32) -> Vec<u8> {
        let mut h = Writer::default();
        h.byte(b'l');
        h.byte(1); // METHOD_CALL
        h.byte(0);
        h.byte(1); // protocol version
        h.u32(self.body.len() as u32);
        h.u32(serial);
        let field = |w: &mut Writer, code: u8, sig: &str, val: &str| {
            w.struct_start();
            w.byte(code);
            w.signature(sig);
            if sig == "g" {
                w.signature(val);
            } else {
                w.str(val);
            }
        };
        h.array(8, |w| {
            field(w, PATH, "o", self.path);
            field(w, INTERFACE, "s", self.interface);
            field(w, MEMBER, "s", self.member);
            if let Some(d) = self.dest {
                field(w, DESTINATION, "s", d);
            }
            if !self.signature.is_empty() {
                field(w, SIGNATURE, "g", self.signature);
            }
        });
        h.pad(8);
        h.buf.extend_from_slice(&self.body);
        h.buf
    }
}

/// What a received message tells.
#[derive(Debug, Default, PartialEq)]
pub struct Received {
    pub kind: u8,
    pub reply_serial: Option<u32>,
    pub error_name: Option<String>,
    /// The body's first string, when its signature starts with one (an
    /// error's message).
    pub first_string: Option<String>,
}

/// The fixed part of a header: the lengths of the header-field array and
/// of the body, from the first 16 bytes.
pub fn lengths(fixed: &[u8; 16]) -> Result<(usize, usize), String> {
    let le = match fixed[0] {
        b'l' => true,
        b'B' => false,
        b => return Err(format!("bad byte order mark {b:#x}")),
    };
    let u = |i: usize| read_u32(&fixed[i..i + 4], le);
    Ok((u(12) as usize, u(4) as usize))
}

fn read_u32(b: &[u8], le: bool) -> u32 {
    let a = [b[0], b[1], b[2], b[3]];
    if le {
        u32::from_le_bytes(a)
    } else {
        u32::from_be_bytes(a)
    }
}

/// A reader over one buffer, aligning from its start.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
    le: bool,
}

impl Reader<'_> {
    fn align(&mut self, a: usize) {
        self.at = self.at.div_ceil(a) * a;
    }

    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let s = self
            .b
            .get(self.at..self.at + n)
            .ok_or("message ends early")?;
        self.at += n;
        Ok(s)
    }

    fn u32(&mut self) -> Result<u32, String> {
        self.align(4);
        let le = self.le;
        Ok(read_u32(self.take(4)?, le))
    }

    fn str(&mut self) -> Result<String, String> {
        let n = self.u32()? as usize;
        let s = String::from_utf8_lossy(self.take(n)?).into_owned();
        self.take(1)?;
        Ok(s)
    }

    fn signature(&mut self) -> Result<String, String> {
        let n = self.take(1)?[0] as usize;
        let s = String::from_utf8_lossy(self.take(n)?).into_owned();
        self.take(1)?;
        Ok(s)
    }
}

/// Reads a whole message: `head` is the fixed part and the header fields
/// (padded to 8), `body` the body.
pub fn parse(head: &[u8], body: &[u8]) -> Result<Received, String> {
    let le = head.first() == Some(&b'l');
    let mut r = Reader { b: head, at: 0, le };
    let kind = r.take(2)?[1];
    r.at = 12;
    let fields_len = r.u32()? as usize;
    let end = 16 + fields_len;
    let mut out = Received {
        kind,
        ..Default::default()
    };
    let mut body_sig = String::new();
    while r.at < end {
        r.align(8);
        let code = r.take(1)?[0];
        let sig = r.signature()?;
        match sig.as_str() {
            "u" => {
                let v = r.u32()?;
                if code == REPLY_SERIAL {
                    out.reply_serial = Some(v);
                }
            }
            "s" | "o" => {
                let v = r.str()?;
                if code == ERROR_NAME {
                    out.error_name = Some(v);
                }
            }
            "g" => {
                let v = r.signature()?;
                if code == SIGNATURE {
                    body_sig = v;
                }
            }
            other => return Err(format!("header field {code} of type {other:?}")),
        }
    }
    if body_sig.starts_with('s') {
        let mut b = Reader { b: body, at: 0, le };
        out.first_string = b.str().ok();
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn arrays_align_their_elements_and_count_without_the_padding() {
        let mut w = Writer::default();
        w.byte(7);
        w.properties(&[("A", Value::U64(1))]);
        // byte, pad to 4, length, pad to 8, then the struct: "A" (4+1+1),
        // signature "t" (3), pad to 8, the u64: 24 bytes from 8.
        assert_eq!(&w.buf[4..8], &24u32.to_le_bytes());
        assert_eq!(w.buf.len(), 8 + 24);
        assert_eq!(&w.buf[8..14], &[1, 0, 0, 0, b'A', 0]);
        assert_eq!(&w.buf[14..17], &[1, b't', 0]);
        assert_eq!(&w.buf[24..32], &1u64.to_le_bytes());
        let mut e = Writer::default();
        e.array(8, |_| {});
        assert_eq!(e.buf, vec![0, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn a_call_round_trips_through_the_reader() {
        let mut body = Writer::default();
        body.str("x.slice");
        let msg = Call {
            dest: Some("org.freedesktop.systemd1"),
            path: "/org/freedesktop/systemd1",
            interface: "org.freedesktop.systemd1.Manager",
            member: "StopUnit",
            signature: "s",
            body: body.buf,
        }
        .encode(9);
        let fixed: [u8; 16] = msg[..16].try_into().unwrap();
        let (fields, blen) = lengths(&fixed).unwrap();
        let hlen = (16 + fields).div_ceil(8) * 8;
        assert_eq!(msg.len(), hlen + blen);
        let got = parse(&msg[..hlen], &msg[hlen..]).unwrap();
        assert_eq!(got.kind, 1);
        assert_eq!(got.first_string.as_deref(), Some("x.slice"));
    }

    #[test]
    fn an_error_reply_in_either_byte_order() {
        for le in [true, false] {
            let u = |v: u32| if le { v.to_le_bytes() } else { v.to_be_bytes() };
            let mut h = vec![if le { b'l' } else { b'B' }, ERROR, 0, 1];
            let mut body = Vec::new();
            body.extend_from_slice(&u(3));
            body.extend_from_slice(b"bad\0");
            h.extend_from_slice(&u(body.len() as u32));
            h.extend_from_slice(&u(5));
            let mut f = vec![ERROR_NAME, 1, b's', 0];
            f.extend_from_slice(&u(4));
            f.extend_from_slice(b"a.Ex\0");
            f.extend_from_slice(&[0, 0, 0]); // to 8
            f.extend_from_slice(&[REPLY_SERIAL, 1, b'u', 0]);
            f.extend_from_slice(&u(9));
            f.extend_from_slice(&[SIGNATURE, 1, b'g', 0, 1, b's', 0]);
            // The array's length leaves out the header's final padding.
            h.extend_from_slice(&u(f.len() as u32));
            h.extend_from_slice(&f);
            h.push(0);
            let got = parse(&h, &body).unwrap();
            assert_eq!(got.kind, ERROR);
            assert_eq!(got.reply_serial, Some(9));
            assert_eq!(got.error_name.as_deref(), Some("a.Ex"));
            assert_eq!(got.first_string.as_deref(), Some("bad"));
        }
        assert!(lengths(&[b'x'; 16]).is_err());
    }
}
