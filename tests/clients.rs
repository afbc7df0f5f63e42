//! Clients other than tonic reach husk's socket: what the kubelet (≤ 1.30,
//! grpc-go dialled with a bare socket path), grpc-python (the gRPC C core)
//! and others put in `:authority` must not keep them out.
//!
//! - A raw HTTP/2 client sends exactly the kubelet 1.28 request: the socket
//!   path as `:authority`, an HPACK dynamic table in use, and a second call
//!   on the same connection that refers back to it.
//! - An empty and a percent-encoded `:authority` are served too.
//! - grpc-python from Debian (python3-grpcio) calls Version with the
//!   `unix:` and `unix://` targets.
//! - The caller's deadline answers DEADLINE_EXCEEDED (grpc-go's
//!   expectation) rather than tonic's CANCELLED.
#![allow(clippy::unwrap_used)]

mod common;

use common::server::Husk;
use loona_hpack::{Decoder, Encoder};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// `VersionRequest{version: "v1"}` in a gRPC message frame.
fn version_message() -> Vec<u8> {
    let pb = [0x0a, 0x02, b'v', b'1'];
    let mut m = vec![0u8];
    m.extend_from_slice(&(pb.len() as u32).to_be_bytes());
    m.extend_from_slice(&pb);
    m
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut v = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    v.extend_from_slice(&stream.to_be_bytes());
    v.extend_from_slice(payload);
    v
}

/// What came back on one stream: its headers and trailers, and its data.
#[derive(Default, Debug)]
struct Answer {
    headers: Vec<(String, String)>,
    data: Vec<u8>,
    reset: Option<u32>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A minimal HTTP/2 client over a unix socket that sends header blocks
/// exactly as given.
struct RawH2 {
    sock: UnixStream,
    enc: Encoder<'static>,
    dec: Decoder<'static>,
    buf: Vec<u8>,
}

impl RawH2 {
    fn connect(path: &std::path::Path) -> RawH2 {
        let mut sock = UnixStream::connect(path).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        sock.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").unwrap();
        sock.write_all(&frame(0x4, 0, 0, &[])).unwrap();
        RawH2 {
            sock,
            enc: Encoder::new(),
            dec: Decoder::new(),
            buf: Vec::new(),
        }
    }

    /// Calls `method` with `authority`, returns what the server answered.
    fn call(&mut self, stream: u32, method: &str, authority: &[u8], body: &[u8]) -> Answer {
        let path = format!("/runtime.v1.RuntimeService/{method}");
        self.call_with(stream, &path, authority, &[], body)
    }

    fn call_with(
        &mut self,
        stream: u32,
        path: &str,
        authority: &[u8],
        extra: &[(&[u8], &[u8])],
        body: &[u8],
    ) -> Answer {
        let mut headers: Vec<(&[u8], &[u8])> = vec![
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":path", path.as_bytes()),
            (b":authority", authority),
            (b"content-type", b"application/grpc"),
            (b"user-agent", b"grpc-go/1.58.3"),
            (b"te", b"trailers"),
        ];
        headers.extend_from_slice(extra);
        let block = self.enc.encode(headers);
        self.sock
            .write_all(&frame(0x1, 0x4, stream, &block))
            .unwrap();
        self.sock.write_all(&frame(0x0, 0x1, stream, body)).unwrap();
        let mut a = Answer::default();
        loop {
            let (kind, flags, sid, payload) = self.next_frame();
            match kind {
                0x4 if flags & 1 == 0 => self.sock.write_all(&frame(0x4, 1, 0, &[])).unwrap(),
                0x6 if flags & 1 == 0 => self.sock.write_all(&frame(0x6, 1, 0, &payload)).unwrap(),
                0x1 if sid == stream => {
                    for (n, v) in self.dec.decode(&payload).unwrap() {
                        a.headers
                            .push((String::from_utf8(n).unwrap(), String::from_utf8(v).unwrap()));
                    }
                    if flags & 1 != 0 {
                        return a;
                    }
                }
                0x0 if sid == stream => {
                    a.data.extend_from_slice(&payload);
                    if flags & 1 != 0 {
                        return a;
                    }
                }
                0x3 if sid == stream => {
                    a.reset = Some(u32::from_be_bytes(payload[..4].try_into().unwrap()));
                    return a;
                }
                0x7 => panic!("server sent GOAWAY: {payload:?}"),
                _ => {}
            }
        }
    }

    fn next_frame(&mut self) -> (u8, u8, u32, Vec<u8>) {
        loop {
            if self.buf.len() >= 9 {
                let len = (usize::from(self.buf[0]) << 16)
                    | (usize::from(self.buf[1]) << 8)
                    | usize::from(self.buf[2]);
                if self.buf.len() >= 9 + len {
                    let f: Vec<u8> = self.buf.drain(..9 + len).collect();
                    let sid = u32::from_be_bytes(f[5..9].try_into().unwrap()) & 0x7fff_ffff;
                    return (f[3], f[4], sid, f[9..].to_vec());
                }
            }
            let mut chunk = [0u8; 16384];
            let n = self.sock.read(&mut chunk).unwrap();
            assert!(n > 0, "server closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn kubelet_128_style_authorities_are_served() {
    let h = Husk::start().await;
    let sock = h.socket();
    let sock_path = sock.to_str().unwrap().as_bytes().to_vec();
    tokio::task::spawn_blocking(move || {
        let mut c = RawH2::connect(&sock);
        // As kubelet 1.28 sends it: the socket path.
        let a = c.call(1, "Version", &sock_path, &version_message());
        assert_eq!(a.reset, None, "stream reset: {a:?}");
        assert_eq!(a.header(":status"), Some("200"));
        assert_eq!(a.header("grpc-status"), Some("0"), "{a:?}");
        assert!(String::from_utf8_lossy(&a.data).contains("husk"));
        // The same again: now a reference into the client's HPACK table.
        let a = c.call(3, "Version", &sock_path, &version_message());
        assert_eq!(a.header("grpc-status"), Some("0"), "{a:?}");
        // Empty and percent-encoded (the gRPC C core's form).
        let a = c.call(5, "Version", b"", &version_message());
        assert_eq!(a.header("grpc-status"), Some("0"), "{a:?}");
        let a = c.call(
            7,
            "Version",
            b"%2Frun%2Fhusk%2Fhusk.sock",
            &version_message(),
        );
        assert_eq!(a.header("grpc-status"), Some("0"), "{a:?}");
        // A good authority is left alone.
        let a = c.call(9, "Version", b"localhost", &version_message());
        assert_eq!(a.header("grpc-status"), Some("0"), "{a:?}");
        // An unknown RPC still gets its gRPC answer, not a reset.
        let a = c.call(11, "NoSuchCall", &sock_path, &version_message());
        assert_eq!(a.header("grpc-status"), Some("12"), "{a:?}");
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_http2_closes_only_that_connection() {
    let h = Husk::start().await;
    let sock = h.socket();
    let s2 = sock.clone();
    tokio::task::spawn_blocking(move || {
        let mut bad = UnixStream::connect(&s2).unwrap();
        bad.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        bad.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").unwrap();
        // A CONTINUATION with no HEADERS before it.
        bad.write_all(&frame(0x9, 0x4, 1, &[0x82])).unwrap();
        let mut rest = Vec::new();
        let _ = bad.read_to_end(&mut rest);
    })
    .await
    .unwrap();
    let mut rt = h.runtime().await;
    let v = rt
        .version(husk::api::cri::VersionRequest::default())
        .await
        .unwrap();
    assert_eq!(v.get_ref().runtime_name, "husk");
}

/// grpc-python is Debian's python3-grpcio (the set-up installs it).
#[tokio::test(flavor = "multi_thread")]
async fn grpc_python_calls_version() {
    let have = std::process::Command::new("/usr/bin/python3")
        .args(["-c", "import grpc"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(
        have,
        "python3-grpcio is missing: packaging/setup-dev.sh installs it"
    );
    let h = Husk::start().await;
    let script = r#"
import sys, grpc
ok = []
for target in sys.argv[1:]:
    ch = grpc.insecure_channel(target)
    call = ch.unary_unary('/runtime.v1.RuntimeService/Version')
    out = call(b'\x0a\x02v1', timeout=10)
    assert b'husk' in out, out
    ok.append(target)
print('ok', len(ok))
"#;
    let sock = h.socket().display().to_string();
    let out = tokio::process::Command::new("/usr/bin/python3")
        .arg("-c")
        .arg(script)
        .arg(format!("unix:{sock}"))
        .arg(format!("unix://{sock}"))
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok 2");
}

/// The server's own answer to a passed deadline (grpc-go and tonic clients
/// also time out locally, so a raw client shows what husk sends).
#[tokio::test(flavor = "multi_thread")]
async fn a_passed_deadline_is_deadline_exceeded() {
    let h = Husk::start().await;
    // A registry that accepts and never answers: the pull can only end by
    // the deadline.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    h.hosts_toml(
        &format!("127.0.0.1:{port}"),
        &format!("server = \"http://127.0.0.1:{port}\"\n"),
    );
    let image = format!("127.0.0.1:{port}/stalls/forever:1");
    let mut spec = vec![0x0a, image.len() as u8];
    spec.extend_from_slice(image.as_bytes());
    let mut pb = vec![0x0a, spec.len() as u8];
    pb.extend_from_slice(&spec);
    let mut msg = vec![0u8];
    msg.extend_from_slice(&(pb.len() as u32).to_be_bytes());
    msg.extend_from_slice(&pb);
    let sock = h.socket();
    let a = tokio::task::spawn_blocking(move || {
        let mut c = RawH2::connect(&sock);
        c.call_with(
            1,
            "/runtime.v1.ImageService/PullImage",
            b"localhost",
            &[(b"grpc-timeout", b"300m")],
            &msg,
        )
    })
    .await
    .unwrap();
    assert_eq!(a.header("grpc-status"), Some("4"), "{a:?}");
    drop(l);
}
