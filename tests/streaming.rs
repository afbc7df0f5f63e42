//! Exec, Attach and PortForward on a real husk serve, through husk's own
//! streaming client, over SPDY and WebSocket: exit codes on the error
//! stream, stdin, a tty with resize, attach to a running container (and
//! stdin_once), port-forward to an httpd in a pod with two connections at
//! once, refused tokens, and nothing left behind.
#![allow(clippy::unwrap_used)]

mod common;

use common::stream::{attach_echo, attach_tty_resized, exec_url, stdio, wait_until, TTY_ECHO};

use common::ctr::{create_start, pod_config};
use common::images::*;
use common::pod::*;
use common::server::Husk;
use husk::api::cri::*;
use husk::streaming::client::{self, ClientError, PortForwarder, Tls, Transport};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BOTH: [Transport; 2] = [Transport::Spdy, Transport::WebSocket];

async fn app_image(p: &Pod) -> String {
    let mut entries = busybox_entries();
    for a in ["stty", "tr", "printf", "seq", "wc"] {
        entries.push(Entry::Symlink(format!("bin/{a}"), "busybox".into()));
    }
    let img = common::images::Image::with_config(
        vec![Layer::new(&entries, Compression::Gzip)],
        "amd64",
        serde_json::json!({"Env": ["PATH=/bin"], "WorkingDir": "/"}),
    );
    Pusher::new(&p.reg)
        .image("app/stream", "v1", &img, Format::Oci)
        .await;
    let r = format!("{}/app/stream:v1", p.reg.host());
    p.h.pull(&r).await.unwrap();
    r
}

fn ccfg(image: &str, name: &str, command: &[&str]) -> ContainerConfig {
    common::ctr::ccfg(image, name, command, &[])
}

/// Processes in the container's cgroup (pids hierarchy, v1).
fn cgroup_procs(p: &Pod, id: &str) -> usize {
    for h in cgroup_hierarchies() {
        let f = h.join(&p.cgroup_parent).join(id).join("cgroup.procs");
        if let Ok(s) = std::fs::read_to_string(f) {
            return s.lines().count();
        }
    }
    0
}

fn shim_pid(h: &Husk, pod: &str) -> i32 {
    std::fs::read_to_string(h.dir.path().join("run/s").join(pod).join("shim.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn fds(pid: i32) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .map(|e| {
            std::fs::read_link(e.path())
                .map(|l| l.display().to_string())
                .unwrap_or_default()
        })
        .map(|l| {
            if l.starts_with("socket:") || l.starts_with("pipe:") {
                l.split(':').next().unwrap_or("").to_string()
            } else {
                l
            }
        })
        .collect();
    v.sort();
    v
}

fn zombie_children(pid: i32) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.len() > 2 && f[0] == "Z" && f[1] == pid.to_string() {
            n += 1;
        }
    }
    n
}

#[tokio::test(flavor = "multi_thread")]
async fn exec_stdio_exit_codes_tty_resize_and_no_leaks() {
    if !common::require_root() {
        return;
    }
    let p = setup(vec![]).await;
    let image = app_image(&p).await;
    let pc = pod_config(&p, "execs");
    let pod = run(&p.h, pc.clone()).await.unwrap();
    let id = create_start(
        &p.h,
        &pod,
        &pc,
        ccfg(&image, "sleeper", &["/bin/sleep", "100000"]),
    )
    .await;
    let tls = Tls::default();
    let shim = shim_pid(&p.h, &pod);
    // One exec first so lazily opened files are counted in the baseline.
    let url = exec_url(&p.h, &id, &["true"], false, false).await;
    let (io, _, _) = stdio(None, false);
    assert_eq!(
        client::remotecommand(&url, Transport::Spdy, &tls, io)
            .await
            .unwrap(),
        0
    );
    // The baseline: the shim's listener is its only socket (the first
    // exec's connection may still be closing).
    wait_until("the first exec's connection to close", || {
        fds(shim).iter().filter(|f| *f == "socket").count() == 1
    })
    .await;
    let fds_before = fds(shim);

    for t in BOTH {
        // stdout, stderr and a non-zero exit code.
        let url = exec_url(
            &p.h,
            &id,
            &["sh", "-c", "echo out; echo err >&2; exit 3"],
            false,
            false,
        )
        .await;
        let (io, out, err) = stdio(None, false);
        let code = client::remotecommand(&url, t, &tls, io).await.unwrap();
        assert_eq!(
            (code, out.text(), err.text()),
            (3, "out\n".into(), "err\n".into()),
            "{t:?}"
        );

        // stdin to cat, EOF ends it.
        let url = exec_url(&p.h, &id, &["sh", "-c", "cat; echo done"], true, false).await;
        let input: Vec<u8> = (0..200_000u32).map(|i| b'a' + (i % 26) as u8).collect();
        let (io, out, _) = stdio(Some(Box::new(std::io::Cursor::new(input.clone()))), false);
        assert_eq!(
            client::remotecommand(&url, t, &tls, io).await.unwrap(),
            0,
            "{t:?}"
        );
        let mut want = String::from_utf8(input).unwrap();
        want.push_str("done\n");
        assert_eq!(out.text().len(), want.len(), "{t:?}");
        assert_eq!(out.text(), want, "{t:?}");

        // A terminal: resize before the command reads its size.
        let url = exec_url(
            &p.h,
            &id,
            &["sh", "-c", "read x; stty size; test -t 0 && echo tty"],
            true,
            true,
        )
        .await;
        let (stdin_r, mut stdin_w) = tokio::io::duplex(1024);
        let (rtx, rrx) = tokio::sync::mpsc::channel(4);
        let (mut io, out, _) = stdio(Some(Box::new(stdin_r)), true);
        io.resize = Some(rrx);
        let session =
            tokio::spawn(async move { client::remotecommand(&url, t, &Tls::default(), io).await });
        rtx.send((132, 50)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        stdin_w.write_all(b"go\n").await.unwrap();
        let code = tokio::time::timeout(Duration::from_secs(20), session)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(code, 0, "{t:?}: {}", out.text());
        assert!(out.text().contains("50 132"), "{t:?}: {:?}", out.text());
        assert!(out.text().contains("tty"), "{t:?}: {:?}", out.text());
        drop(stdin_w);
    }

    // A client that goes away kills its exec.
    let url = exec_url(&p.h, &id, &["sleep", "1000"], false, false).await;
    let (io, _, _) = stdio(None, false);
    let abandoned = tokio::spawn(async move {
        client::remotecommand(&url, Transport::Spdy, &Tls::default(), io).await
    });
    wait_until("the exec to start", || cgroup_procs(&p, &id) == 2).await;
    abandoned.abort();
    wait_until("the abandoned exec to be killed", || {
        cgroup_procs(&p, &id) == 1
    })
    .await;

    // Refusals.
    let mut rt = p.h.runtime().await;
    let e = rt
        .exec(ExecRequest {
            container_id: "nope".into(),
            cmd: vec!["true".into()],
            stdout: true,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);
    let e = rt
        .exec(ExecRequest {
            container_id: id.clone(),
            cmd: vec!["true".into()],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        e.code(),
        tonic::Code::InvalidArgument,
        "no stream asked for"
    );
    let e = rt
        .attach(AttachRequest {
            container_id: id.clone(),
            tty: true,
            stdout: true,
            stderr: true,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "tty with stderr");

    // Nothing left: no exec process, no zombie, no descriptor.
    assert_eq!(cgroup_procs(&p, &id), 1);
    wait_until("no zombies under the shim", || zombie_children(shim) == 0).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while fds(shim) != fds_before {
        assert!(
            Instant::now() < deadline,
            "the shim's descriptors: {:?}, before: {fds_before:?}",
            fds(shim)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    rt.stop_container(StopContainerRequest {
        container_id: id.clone(),
        timeout: 0,
    })
    .await
    .unwrap();
    let e = rt
        .exec(ExecRequest {
            container_id: id.clone(),
            cmd: vec!["true".into()],
            stdout: true,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    rt.stop_pod_sandbox(StopPodSandboxRequest {
        pod_sandbox_id: pod.clone(),
    })
    .await
    .unwrap();
    rt.remove_pod_sandbox(RemovePodSandboxRequest {
        pod_sandbox_id: pod,
    })
    .await
    .unwrap();
    assert_eq!(leftovers(&p), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn attach_to_a_printing_container_and_to_cat_with_stdin_once() {
    if !common::require_root() {
        return;
    }
    let p = setup(vec![]).await;
    let image = app_image(&p).await;
    let pc = pod_config(&p, "attach");
    let pod = run(&p.h, pc.clone()).await.unwrap();
    let mut rt = p.h.runtime().await;

    // A container printing in a loop: two clients in turn see new lines.
    let ticker = create_start(
        &p.h,
        &pod,
        &pc,
        ccfg(
            &image,
            "ticker",
            &[
                "sh",
                "-c",
                "i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.1; done",
            ],
        ),
    )
    .await;
    for t in BOTH {
        let url = rt
            .attach(AttachRequest {
                container_id: ticker.clone(),
                stdout: true,
                stderr: true,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .url;
        let (io, out, _) = stdio(None, false);
        let session =
            tokio::spawn(async move { client::remotecommand(&url, t, &Tls::default(), io).await });
        wait_until("attached output", || {
            out.text().matches("tick").count() >= 3
        })
        .await;
        session.abort();
        let lines: Vec<u64> = out
            .text()
            .lines()
            .filter_map(|l| l.strip_prefix("tick ").and_then(|n| n.parse().ok()))
            .collect();
        assert!(
            lines.windows(2).all(|w| w[1] == w[0] + 1),
            "{t:?}: in order: {lines:?}"
        );
    }
    // Detaching left it running, and its log kept every line.
    let st = rt
        .container_status(ContainerStatusRequest {
            container_id: ticker.clone(),
            verbose: false,
        })
        .await
        .unwrap()
        .into_inner()
        .status
        .unwrap();
    assert_eq!(st.state, ContainerState::ContainerRunning as i32);

    // cat with stdin_once: the attach's stdin reaches it, closing it ends cat.
    for (i, t) in BOTH.into_iter().enumerate() {
        let mut c = ccfg(
            &image,
            &format!("cat{i}"),
            &["sh", "-c", "cat; echo cat-done"],
        );
        c.stdin = true;
        c.stdin_once = true;
        if i == 1 {
            // As critest creates it: no log path; attach still sees output.
            c.log_path.clear();
        }
        let id = create_start(&p.h, &pod, &pc, c).await;
        let (code, out) = attach_echo(&mut rt, &id, t, "ping\n").await;
        assert_eq!(code, 0, "{t:?}");
        assert_eq!(out, "ping\ncat-done\n", "{t:?}");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let st = rt
                .container_status(ContainerStatusRequest {
                    container_id: id.clone(),
                    verbose: false,
                })
                .await
                .unwrap()
                .into_inner()
                .status
                .unwrap();
            if st.state == ContainerState::ContainerExited as i32 {
                assert_eq!(st.exit_code, 0);
                break;
            }
            assert!(Instant::now() < deadline, "cat did not end: {st:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    // A stdin container that is not stdin_once: the attach ends when the
    // client's stdin does (as crictl `attach -i` with piped input expects),
    // and the container goes on.
    let mut c = ccfg(&image, "keeps", &["sh", "-c", "cat"]);
    c.stdin = true;
    let id = create_start(&p.h, &pod, &pc, c).await;
    for t in BOTH {
        let (code, _) = attach_echo(&mut rt, &id, t, "hello\n").await;
        assert_eq!(code, 0, "{t:?}");
    }
    let st = rt
        .container_status(ContainerStatusRequest {
            container_id: id.clone(),
            verbose: false,
        })
        .await
        .unwrap()
        .into_inner()
        .status
        .unwrap();
    assert_eq!(st.state, ContainerState::ContainerRunning as i32);
    rt.stop_pod_sandbox(StopPodSandboxRequest {
        pod_sandbox_id: pod.clone(),
    })
    .await
    .unwrap();
    rt.remove_pod_sandbox(RemovePodSandboxRequest {
        pod_sandbox_id: pod,
    })
    .await
    .unwrap();
    assert_eq!(leftovers(&p), Vec::<String>::new());
}

async fn http_get(pf: &PortForwarder, port: u16) -> Result<String, ClientError> {
    let (mine, theirs) = tokio::io::duplex(64 * 1024);
    let (mut r, mut w) = tokio::io::split(mine);
    w.write_all(b"GET /index.html HTTP/1.0\r\n\r\n")
        .await
        .unwrap();
    let reader = tokio::spawn(async move {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s).await;
        s
    });
    pf.forward(port, theirs).await?;
    drop(w);
    Ok(reader.await.unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn port_forward_to_httpd_two_connections_both_transports() {
    if !common::require_root() {
        return;
    }
    let p = setup(vec![]).await;
    let image = app_image(&p).await;
    let pc = pod_config(&p, "web");
    let pod = run(&p.h, pc.clone()).await.unwrap();
    let body: String = "0123456789abcdef".repeat(64 * 1024);
    let script = format!(
        "mkdir -p /tmp/www && printf hello-pf > /tmp/www/index.html && head -c {} /dev/zero | tr '\\0' x > /tmp/www/big && exec httpd -f -p 8080 -h /tmp/www",
        body.len()
    );
    create_start(
        &p.h,
        &pod,
        &pc,
        ccfg(&image, "httpd", &["sh", "-c", &script]),
    )
    .await;
    let mut rt = p.h.runtime().await;
    let h = &p.h;
    let url = |ports: Vec<i32>| {
        let pod = pod.clone();
        async move {
            h.runtime()
                .await
                .port_forward(PortForwardRequest {
                    pod_sandbox_id: pod,
                    port: ports,
                })
                .await
                .unwrap()
                .into_inner()
                .url
        }
    };
    for t in BOTH {
        let pf = PortForwarder::connect(&url(vec![]).await, t, &Tls::default())
            .await
            .unwrap();
        // httpd may still be starting.
        let mut first = String::new();
        for _ in 0..50 {
            match http_get(&pf, 8080).await {
                Ok(s) if s.contains("hello-pf") => {
                    first = s;
                    break;
                }
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        assert!(first.contains("200 OK"), "{t:?}: {first}");
        // Two connections at once on one session.
        let (a, b) = tokio::join!(http_get(&pf, 8080), http_get(&pf, 8080));
        assert!(a.unwrap().contains("hello-pf"), "{t:?}");
        assert!(b.unwrap().contains("hello-pf"), "{t:?}");
        // Nothing listening: the error stream says so.
        let e = http_get(&pf, 9).await.unwrap_err().to_string();
        assert!(e.contains("error forwarding port 9"), "{t:?}: {e}");
        pf.close().await;
    }
    // The WebSocket channel form: ports from the request, data and error
    // channel per port.
    let u = url(vec![8080, 9]).await;
    let (mine, theirs) = tokio::io::duplex(1 << 20);
    let (idle, idle_theirs) = tokio::io::duplex(1024);
    let (mut r, mut w) = tokio::io::split(mine);
    w.write_all(b"GET /big HTTP/1.0\r\n\r\n").await.unwrap();
    let reader = tokio::spawn(async move {
        let mut s = Vec::new();
        let _ = r.read_to_end(&mut s).await;
        s
    });
    let res =
        client::forward_ws_channels(&u, &Tls::default(), vec![(8080, theirs), (9, idle_theirs)])
            .await;
    drop(idle);
    let got = reader.await.unwrap();
    assert!(
        got.ends_with(&vec![b'x'; body.len()]),
        "{} bytes",
        got.len()
    );
    let e = res.unwrap_err().to_string();
    assert!(e.contains("error forwarding port 9"), "{e}");

    let e = rt
        .port_forward(PortForwardRequest {
            pod_sandbox_id: "nope".into(),
            port: vec![],
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);
    rt.stop_pod_sandbox(StopPodSandboxRequest {
        pod_sandbox_id: pod.clone(),
    })
    .await
    .unwrap();
    rt.remove_pod_sandbox(RemovePodSandboxRequest {
        pod_sandbox_id: pod,
    })
    .await
    .unwrap();
    assert_eq!(leftovers(&p), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn used_or_expired_tokens_get_404() {
    if !common::require_root() {
        return;
    }
    let mut p = setup(vec![]).await;
    p.h.extra
        .extend(["--streaming-token-ttl".to_string(), "2".to_string()]);
    p.h.restart().await;
    let image = app_image(&p).await;
    let pc = pod_config(&p, "tokens");
    let pod = run(&p.h, pc.clone()).await.unwrap();
    let id = create_start(
        &p.h,
        &pod,
        &pc,
        ccfg(&image, "sleeper", &["/bin/sleep", "100000"]),
    )
    .await;
    for t in BOTH {
        let url = exec_url(&p.h, &id, &["echo", "once"], false, false).await;
        let (io, out, _) = stdio(None, false);
        assert_eq!(
            client::remotecommand(&url, t, &Tls::default(), io)
                .await
                .unwrap(),
            0
        );
        assert_eq!(out.text(), "once\n");
        let (io, _, _) = stdio(None, false);
        match client::remotecommand(&url, t, &Tls::default(), io).await {
            Err(ClientError::Refused { status: 404, .. }) => {}
            other => panic!("{t:?}: a reused token: {other:?}"),
        }
        let url = exec_url(&p.h, &id, &["true"], false, false).await;
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let (io, _, _) = stdio(None, false);
        match client::remotecommand(&url, t, &Tls::default(), io).await {
            Err(ClientError::Refused { status: 404, .. }) => {}
            other => panic!("{t:?}: an expired token: {other:?}"),
        }
    }
    // A token for exec does not open attach, and a made-up one nothing.
    let url = exec_url(&p.h, &id, &["true"], false, false).await;
    let forged = url.replace("/exec/", "/attach/");
    let (io, _, _) = stdio(None, false);
    assert!(matches!(
        client::remotecommand(&forged, Transport::Spdy, &Tls::default(), io).await,
        Err(ClientError::Refused { status: 404, .. })
    ));
    let mut rt = p.h.runtime().await;
    rt.stop_pod_sandbox(StopPodSandboxRequest {
        pod_sandbox_id: pod.clone(),
    })
    .await
    .unwrap();
    rt.remove_pod_sandbox(RemovePodSandboxRequest {
        pod_sandbox_id: pod,
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn tty_container_logs_and_attach_with_resize() {
    if !common::require_root() {
        return;
    }
    let p = setup(vec![]).await;
    let image = app_image(&p).await;
    let pc = pod_config(&p, "tty");
    let pod = run(&p.h, pc.clone()).await.unwrap();
    let mut c = ccfg(&image, "term", &["sh", "-c", TTY_ECHO]);
    c.tty = true;
    c.stdin = true;
    let id = create_start(&p.h, &pod, &pc, c).await;
    let log = std::path::Path::new(&pc.log_directory).join("term/0.log");
    for t in BOTH {
        let mut rt = p.h.runtime().await;
        let out = attach_tty_resized(&mut rt, &id, &log, t).await;
        assert!(out.contains("got hello"), "{t:?}: {out:?}");
    }
    assert!(std::fs::read_to_string(&log).unwrap().contains("got hello"));
    let mut rt = p.h.runtime().await;
    rt.stop_pod_sandbox(StopPodSandboxRequest {
        pod_sandbox_id: pod.clone(),
    })
    .await
    .unwrap();
    rt.remove_pod_sandbox(RemovePodSandboxRequest {
        pod_sandbox_id: pod,
    })
    .await
    .unwrap();
    assert_eq!(leftovers(&p), Vec::<String>::new());
}
