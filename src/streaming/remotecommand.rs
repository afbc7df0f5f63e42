//! Exec and attach sessions (the kubelet's remotecommand server): set up
//! the streams the client asked for over SPDY or WebSocket, pump bytes
//! between them and the process's descriptors, apply terminal resizes, and
//! end with the Status on the error stream — Success, NonZeroExitCode with
//! an ExitCode cause, or an internal error.
//!
//! SPDY: the protocol is negotiated from `X-Stream-Protocol-Version`
//! (v5/v4/v3/v2.channel.k8s.io, channel.k8s.io); the client then opens
//! one stream per requested stdio plus error (and resize when tty and
//! v3+), which must all arrive within the creation timeout.
//! WebSocket: the subprotocol comes from `Sec-WebSocket-Protocol`, and an
//! empty message on the lowest writable channel tells the client the
//! session is up, as the kubelet does.

use super::channels::{self, Conn, Sink, Streams};
use super::fdio::Fd;
use super::http::Head;
use super::tokens::StdioOpts;
use super::{spdy, ws, ProcessIo};
use bytes::Bytes;
use std::io;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;

/// SPDY subprotocols, most preferred first.
pub const SPDY_PROTOCOLS: &[&str] = &[
    "v5.channel.k8s.io",
    "v4.channel.k8s.io",
    "v3.channel.k8s.io",
    "v2.channel.k8s.io",
    "channel.k8s.io",
];
/// WebSocket subprotocols (and whether they are base64).
pub const WS_PROTOCOLS: &[(&str, bool)] = &[
    ("v5.channel.k8s.io", false),
    ("v4.channel.k8s.io", false),
    ("v4.base64.channel.k8s.io", true),
    ("channel.k8s.io", false),
    ("base64.channel.k8s.io", true),
    ("", false),
];
/// How long the client has to open its streams.
pub const STREAM_CREATION_TIMEOUT: Duration = Duration::from_secs(30);
/// Output still read after an exec'd process exited (its background
/// children may keep the pipes open).
const DRAIN_GRACE: Duration = Duration::from_secs(1);

/// Sets up the session's streams over an upgraded SPDY connection.
pub async fn spdy_streams<IO>(io: IO, protocol: &str, opts: StdioOpts) -> io::Result<Streams>
where
    IO: AsyncRead + AsyncWrite + Send + 'static,
{
    let (session, mut incoming) = spdy::Session::start(io, true)?;
    let resize_supported = protocol != "channel.k8s.io" && protocol != "v2.channel.k8s.io";
    let expected = 1
        + opts.stdin as usize
        + opts.stdout as usize
        + opts.stderr as usize
        + (opts.tty && resize_supported) as usize;
    let (mut stdin, mut resize, mut stdout, mut stderr, mut error) = (None, None, None, None, None);
    let deadline = tokio::time::Instant::now() + STREAM_CREATION_TIMEOUT;
    let mut got = 0;
    while got < expected {
        let inc = match tokio::time::timeout_at(deadline, incoming.recv()).await {
            Ok(Some(i)) => i,
            Ok(None) => return Err(io::Error::other("connection closed while opening streams")),
            Err(_) => {
                return Err(io::Error::other(
                    "timed out waiting for client to create streams",
                ))
            }
        };
        match inc.headers.get("streamtype").unwrap_or("") {
            "error" => error = Some(Sink::Spdy(inc.writer)),
            "stdin" => stdin = Some(inc.reader.into_channel()),
            "stdout" => stdout = Some(Sink::Spdy(inc.writer)),
            "stderr" => stderr = Some(Sink::Spdy(inc.writer)),
            "resize" => resize = Some(inc.reader.into_channel()),
            other => {
                tracing::debug!(stream_type = other, "unexpected stream type");
                inc.writer.reset().await;
                continue;
            }
        }
        got += 1;
    }
    let error = error.ok_or_else(|| io::Error::other("the client opened no error stream"))?;
    // Streams opened later are not part of the session.
    tokio::spawn(async move {
        while let Some(i) = incoming.recv().await {
            i.writer.reset().await;
        }
    });
    Ok(Streams {
        stdin,
        resize,
        stdout,
        stderr,
        error,
        status_json: protocol == "v4.channel.k8s.io" || protocol == "v5.channel.k8s.io",
        conn: Conn::Spdy(session),
    })
}

/// Sets up the session's channels over an accepted WebSocket.
pub async fn ws_streams<IO>(io: IO, protocol: &str, opts: StdioOpts) -> io::Result<Streams>
where
    IO: AsyncRead + AsyncWrite + Send + 'static,
{
    let base64 = protocol.contains("base64");
    let v5 = protocol == "v5.channel.k8s.io";
    let (mut reader, writer) = ws::split(io, true);
    let (stdin_tx, stdin_rx) = mpsc::channel::<Bytes>(64);
    let (resize_tx, resize_rx) = mpsc::channel::<Bytes>(16);
    let demux = tokio::spawn(async move {
        let mut stdin_tx = opts.stdin.then_some(stdin_tx);
        let mut resize_tx = Some(resize_tx);
        while let Ok(Some(m)) = reader.next().await {
            let Some((ch, data)) = channels::ws_decode(m, base64) else {
                continue;
            };
            match ch {
                channels::STDIN => {
                    if let Some(tx) = &stdin_tx {
                        if !data.is_empty() && tx.send(data.into()).await.is_err() {
                            stdin_tx = None;
                        }
                    }
                }
                channels::RESIZE => {
                    if let Some(tx) = &resize_tx {
                        let _ = tx.send(data.into()).await;
                    }
                }
                channels::CLOSE if v5 => match data.first() {
                    Some(&channels::STDIN) => stdin_tx = None,
                    Some(&channels::RESIZE) => resize_tx = None,
                    _ => {}
                },
                _ => {}
            }
        }
    });
    let sink = |channel| Sink::Ws {
        channel,
        writer: writer.clone(),
        base64,
    };
    let s = Streams {
        stdin: opts.stdin.then_some(stdin_rx),
        resize: opts.tty.then_some(resize_rx),
        stdout: opts.stdout.then(|| sink(channels::STDOUT)),
        stderr: opts.stderr.then(|| sink(channels::STDERR)),
        error: sink(channels::ERROR),
        status_json: protocol.starts_with("v4.") || v5,
        conn: Conn::Ws(writer.clone(), demux),
    };
    let first = s.stdout.as_ref().or(s.stderr.as_ref()).unwrap_or(&s.error);
    first.send(&[]).await?;
    Ok(s)
}

/// How a session ended, as the Status on the error stream says it.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Success,
    ExitCode(i32),
    Failed(String),
}

/// The Kubernetes Status for `o`, as JSON (v4+) or as plain text (older
/// protocols send nothing on success).
pub fn status(o: &Outcome, json: bool, what: &str) -> Option<Vec<u8>> {
    let v = match o {
        Outcome::Success => serde_json::json!({"metadata": {}, "status": "Success"}),
        Outcome::ExitCode(code) => serde_json::json!({
            "metadata": {},
            "status": "Failure",
            "message": format!("command terminated with non-zero exit code: error executing command {what}, exit code {code}"),
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
        }),
        Outcome::Failed(m) => serde_json::json!({
            "metadata": {},
            "status": "Failure",
            "message": format!("Internal error occurred: {m}"),
            "reason": "InternalError",
            "details": {"causes": [{"message": m}]},
            "code": 500,
        }),
    };
    if json {
        return serde_json::to_vec(&v).ok();
    }
    match o {
        Outcome::Success => None,
        _ => v["message"].as_str().map(|m| m.as_bytes().to_vec()),
    }
}

/// Terminal sizes from the resize stream: JSON objects back to back.
fn parse_sizes(buf: &mut Vec<u8>) -> Vec<(u16, u16)> {
    #[derive(serde::Deserialize)]
    struct Size {
        #[serde(rename = "Width")]
        width: u16,
        #[serde(rename = "Height")]
        height: u16,
    }
    let mut out = Vec::new();
    let mut it = serde_json::Deserializer::from_slice(buf).into_iter::<Size>();
    let mut used = 0;
    while let Some(Ok(s)) = it.next() {
        used = it.byte_offset();
        out.push((s.width, s.height));
    }
    buf.drain(..used);
    out
}

async fn pump_out(fd: Arc<Fd>, sink: Sink) {
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        match fd.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if sink.send(&buf[..n]).await.is_err() {
                    break;
                }
            }
        }
    }
    sink.close().await;
}

/// Runs a session to its end and sends the Status. `what` names the
/// command in messages.
pub async fn run(mut s: Streams, mut pio: ProcessIo, tty: bool, what: String) {
    let pty = match pio.pty.take().map(Fd::new).transpose() {
        Ok(p) => p.map(Arc::new),
        Err(e) => return finish(s, Outcome::Failed(format!("pty: {e}")), &what).await,
    };
    let fd = |f: Option<std::os::fd::OwnedFd>| f.and_then(|f| Fd::new(f).ok()).map(Arc::new);
    let stdin_fd = pty.clone().or_else(|| fd(pio.stdin.take()));
    let mut control = pio.control.take();

    // Client stdin → process.
    let mut stdin = s.stdin.take();
    let stdin_closer = pio.stdin_closer.take();
    let stdin_task = tokio::spawn(async move {
        if let (Some(rx), Some(fd)) = (stdin.as_mut(), stdin_fd) {
            while let Some(d) = rx.recv().await {
                if fd.write_all(&d).await.is_err() {
                    break;
                }
            }
            if let Some(close) = stdin_closer {
                close.await;
            }
        }
    });
    // Resizes → TIOCSWINSZ (or the runtime's own terminal's resizer).
    let resizer = pio.resizer.take();
    if let (Some(mut rx), true) = (s.resize.take(), pty.is_some() || resizer.is_some()) {
        let p = pty.clone();
        tokio::spawn(async move {
            let mut buf = Vec::new();
            while let Some(d) = rx.recv().await {
                buf.extend_from_slice(&d);
                for (w, h) in parse_sizes(&mut buf) {
                    match (&p, &resizer) {
                        (Some(p), _) => {
                            let _ = p.resize(w, h);
                        }
                        (None, Some(r)) => r(w, h).await,
                        (None, None) => {}
                    }
                }
                if buf.len() > 4096 {
                    buf.clear();
                }
            }
        });
    }
    // Process → client.
    let mut outs = Vec::new();
    let stdout_src = if tty && pio.exit.is_some() && pty.is_some() {
        pty.clone()
    } else {
        fd(pio.stdout.take())
    };
    if let (Some(src), Some(sink)) = (stdout_src, s.stdout.clone()) {
        outs.push(tokio::spawn(pump_out(src, sink)));
    }
    if let (Some(src), Some(sink)) = (fd(pio.stderr.take()), s.stderr.clone()) {
        outs.push(tokio::spawn(pump_out(src, sink)));
    }
    let stop_outputs: Vec<tokio::task::AbortHandle> =
        outs.iter().map(|o| o.abort_handle()).collect();
    let outputs = async {
        for o in outs.iter_mut() {
            let _ = o.await;
        }
    };
    tokio::pin!(outputs);

    let outcome = match pio.exit.take() {
        // Exec: the exit status, once output is drained (bounded).
        Some(exit) => {
            tokio::pin!(exit);
            let code = tokio::select! {
                r = &mut exit => Some(r),
                _ = s.conn.gone() => None,
            };
            match code {
                None => {
                    // The client left: the exit future goes with this
                    // frame, and its connection closing kills the process.
                    stdin_task.abort();
                    return;
                }
                Some(r) => {
                    let _ = tokio::time::timeout(DRAIN_GRACE, &mut outputs).await;
                    match r {
                        Ok(0) => Outcome::Success,
                        Ok(c) => Outcome::ExitCode(c),
                        Err(e) => Outcome::Failed(e.to_string()),
                    }
                }
            }
        }
        // Attach: until the container's output ends or the client leaves.
        None => {
            let mut stdin_task = stdin_task;
            let ended = loop {
                tokio::select! {
                    _ = &mut outputs => break true,
                    _ = s.conn.gone() => break false,
                    _ = &mut stdin_task, if control.is_some() => {
                        // The client closed stdin: a stdin_once container
                        // gets EOF when its shim sees the control go.
                        control = None;
                        if pio.end_with_stdin {
                            // The attach ends here; its output pipes go.
                            for a in &stop_outputs {
                                a.abort();
                            }
                            break true;
                        }
                    }
                }
            };
            if !ended {
                return;
            }
            Outcome::Success
        }
    };
    drop(control);
    finish(s, outcome, &what).await;
}

async fn finish(s: Streams, outcome: Outcome, what: &str) {
    if let Some(b) = status(&outcome, s.status_json, what) {
        let _ = s.error.send(&b).await;
    }
    s.error.close().await;
    for o in [&s.stdout, &s.stderr].into_iter().flatten() {
        o.close().await;
    }
    s.conn.close().await;
}

/// Picks the SPDY protocol: the client's first that the server knows.
pub fn negotiate_spdy(head: &Head, server: &[&str]) -> Option<String> {
    head.header_list("x-stream-protocol-version")
        .into_iter()
        .find(|p| server.contains(&p.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_forms() {
        let j: serde_json::Value =
            serde_json::from_slice(&status(&Outcome::ExitCode(3), true, "[sh]").expect("json"))
                .expect("parse");
        assert_eq!(j["status"], "Failure");
        assert_eq!(j["reason"], "NonZeroExitCode");
        assert_eq!(j["details"]["causes"][0]["reason"], "ExitCode");
        assert_eq!(j["details"]["causes"][0]["message"], "3");
        assert_eq!(
            status(&Outcome::Success, true, "x").expect("json"),
            br#"{"metadata":{},"status":"Success"}"#.to_vec()
        );
        assert_eq!(status(&Outcome::Success, false, "x"), None);
    }

    #[test]
    fn sizes_back_to_back() {
        let mut b = br#"{"Width":80,"Height":24}{"Width":100,"He"#.to_vec();
        assert_eq!(parse_sizes(&mut b), vec![(80, 24)]);
        b.extend_from_slice(br#"ight":30}"#);
        assert_eq!(parse_sizes(&mut b), vec![(100, 30)]);
        assert!(b.is_empty());
    }
}
