//! Exec and attach sessions through husk's streaming client, for the
//! streaming tests and the node VM's.

use super::Buf;
use husk::api::cri::{AttachRequest, ExecRequest};
use husk::streaming::client::{self, Stdio, Tls, Transport};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;

/// The streaming URL of an Exec of `cmd` in `id` (stderr apart unless a tty).
pub async fn exec_url(
    h: &super::server::Husk,
    id: &str,
    cmd: &[&str],
    stdin: bool,
    tty: bool,
) -> String {
    h.runtime()
        .await
        .exec(ExecRequest {
            container_id: id.into(),
            cmd: cmd.iter().map(|s| s.to_string()).collect(),
            tty,
            stdin,
            stdout: true,
            stderr: !tty,
        })
        .await
        .unwrap()
        .into_inner()
        .url
}

/// Stdio with stdout (and stderr unless `tty`) captured.
pub fn stdio(
    stdin: Option<Box<dyn tokio::io::AsyncRead + Send + Unpin>>,
    tty: bool,
) -> (Stdio, Buf, Buf) {
    let (out, err) = (Buf::default(), Buf::default());
    (
        Stdio {
            stdin,
            stdout: Some(Box::new(out.clone())),
            stderr: (!tty).then(|| Box::new(err.clone()) as Box<_>),
            tty,
            resize: None,
        },
        out,
        err,
    )
}

/// Polls `f` every 50 ms for up to 60 s (a node VM is slow).
pub async fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

type Runtime =
    husk::api::cri::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>;

/// The streaming URL of an Attach to `id` with stdin and stdout, and with
/// a terminal (`tty`) or stderr.
async fn attach_url(rt: &mut Runtime, id: &str, tty: bool) -> String {
    rt.attach(AttachRequest {
        container_id: id.into(),
        stdin: true,
        stdout: true,
        stderr: !tty,
        tty,
    })
    .await
    .unwrap()
    .into_inner()
    .url
}

/// Attaches to `id` with stdin, stdout and stderr, writes `line`, waits for
/// its echo, closes stdin; the session must then end within 60 s. Returns
/// its exit code and everything it printed.
pub async fn attach_echo(rt: &mut Runtime, id: &str, t: Transport, line: &str) -> (i32, String) {
    let url = attach_url(rt, id, false).await;
    let (stdin_r, mut stdin_w) = tokio::io::duplex(1024);
    let (io, out, _) = stdio(Some(Box::new(stdin_r)), false);
    let session =
        tokio::spawn(async move { client::remotecommand(&url, t, &Tls::default(), io).await });
    stdin_w.write_all(line.as_bytes()).await.unwrap();
    wait_until("the echo", || out.text().contains(line)).await;
    drop(stdin_w);
    let code = tokio::time::timeout(Duration::from_secs(60), session)
        .await
        .expect("the attach ends with its stdin")
        .unwrap()
        .unwrap();
    (code, out.text())
}

/// The command of a tty container that `attach_tty_resized` talks to.
pub const TTY_ECHO: &str =
    "test -t 0 && echo on-a-tty; while read l; do echo got $l; stty size; done";

/// Waits for `TTY_ECHO`'s first line in the container's log `log`, then
/// attaches to it with a terminal, resizes it to 100x40, writes a line and
/// waits for the terminal's size in the answer. Returns what it printed.
pub async fn attach_tty_resized(
    rt: &mut Runtime,
    id: &str,
    log: &std::path::Path,
    t: Transport,
) -> String {
    wait_until("the tty's output in the log", || {
        std::fs::read_to_string(log)
            .unwrap_or_default()
            .contains("on-a-tty")
    })
    .await;
    let url = attach_url(rt, id, true).await;
    let (stdin_r, mut stdin_w) = tokio::io::duplex(1024);
    let (rtx, rrx) = tokio::sync::mpsc::channel(4);
    let (mut io, out, _) = stdio(Some(Box::new(stdin_r)), true);
    io.resize = Some(rrx);
    let session =
        tokio::spawn(async move { client::remotecommand(&url, t, &Tls::default(), io).await });
    rtx.send((100, 40)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    stdin_w.write_all(b"hello\n").await.unwrap();
    wait_until("the answer through the terminal", || {
        out.text().contains("40 100")
    })
    .await;
    session.abort();
    out.text()
}
