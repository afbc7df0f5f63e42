//! The kubelet API (HTTPS, client certificates) of a `husk kubelet`
//! joined to the stand-in API server, as the API server calls it for
//! `kubectl logs`, `exec`, `attach` and `port-forward`: /healthz, /pods,
//! /containerLogs (tailLines, timestamps, limitBytes, follow), /exec over
//! SPDY and WebSocket through to husk serve, /attach, /portForward; requests
//! without a client certificate (or with one from another CA) refused.
#![allow(clippy::unwrap_used)]

mod common;

use common::cluster::*;
use common::Buf;
use husk::streaming::client::{self as sc, Stdio, Transport};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

struct Pki {
    _dir: tempfile::TempDir,
    ca: PathBuf,
    client: (PathBuf, PathBuf),
    stranger: (PathBuf, PathBuf),
    args: Vec<String>,
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, name);
    CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap()
}

fn leaf(
    dir: &Path,
    name: &str,
    sans: Vec<String>,
    by: &CertifiedIssuer<'static, KeyPair>,
) -> (PathBuf, PathBuf) {
    let mut p = CertificateParams::new(sans).unwrap();
    p.distinguished_name.push(DnType::CommonName, name);
    let key = KeyPair::generate().unwrap();
    let cert = p.signed_by(&key, by).unwrap();
    (
        write(dir, &format!("{name}.crt"), &cert.pem()),
        write(dir, &format!("{name}.key"), &key.serialize_pem()),
    )
}

/// A cluster CA (server and client certificates) and a stranger's CA.
fn pki() -> Pki {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cluster = ca("test-cluster-ca");
    let ca_path = write(d, "ca.crt", &cluster.pem());
    let server = leaf(
        d,
        "kubelet",
        vec!["127.0.0.1".into(), "localhost".into()],
        &cluster,
    );
    let client = leaf(d, "apiserver-kubelet-client", vec![], &cluster);
    let other = ca("another-ca");
    let stranger = leaf(d, "stranger", vec![], &other);
    let args = vec![
        "--client-ca-file".to_string(),
        ca_path.display().to_string(),
        "--tls-cert-file".into(),
        server.0.display().to_string(),
        "--tls-private-key-file".into(),
        server.1.display().to_string(),
    ];
    Pki {
        _dir: dir,
        ca: ca_path,
        client,
        stranger,
        args,
    }
}

fn port(e: &Env) -> String {
    let a = e.k.args();
    let i = a.iter().position(|x| x == "--port").unwrap();
    a[i + 1].clone()
}

fn http(pki: &Pki, identity: Option<&(PathBuf, PathBuf)>) -> reqwest::Client {
    let mut b = reqwest::Client::builder()
        .add_root_certificate(
            reqwest::Certificate::from_pem(&std::fs::read(&pki.ca).unwrap()).unwrap(),
        )
        .timeout(Duration::from_secs(20));
    if let Some((c, k)) = identity {
        let pem = [std::fs::read(c).unwrap(), std::fs::read(k).unwrap()].concat();
        b = b.identity(reqwest::Identity::from_pem(&pem).unwrap());
    }
    b.build().unwrap()
}

async fn get(c: &reqwest::Client, e: &Env, path: &str) -> (u16, String) {
    let url = format!("https://127.0.0.1:{}{path}", port(e));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match c.get(&url).send().await {
            Ok(r) => {
                let code = r.status().as_u16();
                return (code, r.text().await.unwrap_or_default());
            }
            // A refused handshake (a stranger's certificate) is an answer too.
            Err(err) if Instant::now() >= deadline => return (0, format!("{err:?}")),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

fn tls(pki: &Pki) -> sc::Tls {
    sc::Tls {
        ca: Some(pki.ca.clone()),
        client: Some(pki.client.clone()),
    }
}

async fn exec(e: &Env, pki: &Pki, t: Transport, cmd: &[&str]) -> (i32, String) {
    let q: Vec<String> = cmd
        .iter()
        .map(|c| format!("command={}", c.replace(' ', "+")))
        .collect();
    let url = format!(
        "https://127.0.0.1:{}/exec/default/web/app?{}&output=1&error=1",
        port(e),
        q.join("&")
    );
    let tls = tls(pki);
    let out = Buf::default();
    let io = Stdio {
        stdout: Some(Box::new(out.clone())),
        stderr: Some(Box::new(out.clone())),
        ..Default::default()
    };
    let code = sc::remotecommand(&url, t, &tls, io).await.unwrap();
    (code, out.text())
}

#[tokio::test(flavor = "multi_thread")]
async fn kubelet_api_serves_pods_logs_and_exec_to_clients_it_trusts() {
    if !common::require_root() {
        return;
    }
    let pki = pki();
    let e = env_with(TOKEN, pki.args.clone()).await;
    e.create(
        "web",
        json!([{"name": "app", "image": e.image,
                "command": ["/bin/sh", "-c", "for i in 1 2 3; do echo line$i; done; sleep 1; echo late; sleep 3600"]},
               {"name": "srv", "image": e.image,
                "command": ["/bin/nc", "-ll", "-p", "8080", "-e", "/bin/echo", "pong"]}]),
    );
    e.running_and_ready("web").await;
    let anon = http(&pki, None);
    let trusted = http(&pki, Some(&pki.client));
    let stranger = http(&pki, Some(&pki.stranger));
    // /healthz is open; the rest needs a certificate of the cluster's CA.
    assert_eq!(get(&anon, &e, "/healthz").await, (200, "ok\n".into()));
    assert_eq!(get(&anon, &e, "/pods").await.0, 401);
    let (code, _) = get(&stranger, &e, "/pods").await;
    assert_ne!(code, 200, "a certificate from another CA was accepted");
    let (code, body) = get(&trusted, &e, "/pods").await;
    assert_eq!(code, 200, "{body}");
    let list: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(list["kind"], "PodList");
    assert!(list["items"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["metadata"]["name"] == "web"));
    // Logs, with kubectl's options.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, all) = get(&trusted, &e, "/containerLogs/default/web/app").await;
        if all.contains("late") {
            assert_eq!(all, "line1\nline2\nline3\nlate\n");
            break;
        }
        assert!(Instant::now() < deadline, "logs: {all:?}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let (_, tail) = get(&trusted, &e, "/containerLogs/default/web/app?tailLines=2").await;
    assert_eq!(tail, "line3\nlate\n");
    let (_, ts) = get(
        &trusted,
        &e,
        "/containerLogs/default/web/app?timestamps=true&tailLines=1",
    )
    .await;
    let (t, rest) = ts.split_once(' ').unwrap();
    assert!(t.parse::<k8s_openapi::jiff::Timestamp>().is_ok(), "{ts:?}");
    assert_eq!(rest, "late\n");
    let (_, cut) = get(&trusted, &e, "/containerLogs/default/web/app?limitBytes=8").await;
    assert_eq!(cut, "line1\nli");
    let (code, msg) = get(&trusted, &e, "/containerLogs/default/web/nope").await;
    assert_eq!(code, 404, "{msg}");
    let (code, msg) = get(&trusted, &e, "/containerLogs/default/web/app?previous=true").await;
    assert_eq!(code, 400, "{msg}");
    assert!(msg.contains("previous terminated container"), "{msg}");
    // follow: what the container writes later arrives on the open response.
    let url = format!(
        "https://127.0.0.1:{}/containerLogs/default/web/app?follow=true&tailLines=0",
        port(&e)
    );
    let mut resp = trusted.get(&url).send().await.unwrap();
    let (code, out) = exec(
        &e,
        &pki,
        Transport::Spdy,
        &["/bin/sh", "-c", "echo followed > /proc/1/fd/1"],
    )
    .await;
    assert_eq!(code, 0, "{out}");
    let got = tokio::time::timeout(Duration::from_secs(10), resp.chunk())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(&got[..], b"followed\n");
    drop(resp);
    // attach: the container's output from now on reaches the client.
    let attach_url = format!(
        "https://127.0.0.1:{}/attach/default/web/app?output=1&error=1",
        port(&e)
    );
    let attached = Buf::default();
    let io = Stdio {
        stdout: Some(Box::new(attached.clone())),
        stderr: Some(Box::new(attached.clone())),
        ..Default::default()
    };
    let tls_a = tls(&pki);
    let session =
        tokio::spawn(
            async move { sc::remotecommand(&attach_url, Transport::Spdy, &tls_a, io).await },
        );
    let deadline = Instant::now() + Duration::from_secs(15);
    while !attached.text().contains("to the attached") {
        assert!(
            Instant::now() < deadline,
            "attach saw {:?}",
            attached.text()
        );
        exec(
            &e,
            &pki,
            Transport::Spdy,
            &["/bin/sh", "-c", "echo to the attached > /proc/1/fd/1"],
        )
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    session.abort();
    // exec over both protocols, exit codes included.
    let (code, out) = exec(&e, &pki, Transport::Spdy, &["/bin/echo", "hello spdy"]).await;
    assert_eq!((code, out.as_str()), (0, "hello spdy\n"));
    let (code, out) = exec(
        &e,
        &pki,
        Transport::WebSocket,
        &["/bin/sh", "-c", "echo ws; exit 3"],
    )
    .await;
    assert_eq!((code, out.as_str()), (3, "ws\n"));
    // port-forward to a server in the pod.
    let tls = tls(&pki);
    let pf_url = format!("https://127.0.0.1:{}/portForward/default/web", port(&e));
    let fw = sc::PortForwarder::connect(&pf_url, Transport::Spdy, &tls)
        .await
        .unwrap();
    let (mut local, remote) = tokio::io::duplex(4096);
    let task = tokio::spawn(async move { fw.forward(8080, remote).await });
    let mut got = Vec::new();
    let _ = tokio::time::timeout(
        Duration::from_secs(10),
        tokio::io::AsyncReadExt::read_to_end(&mut local, &mut got),
    )
    .await;
    assert_eq!(String::from_utf8_lossy(&got), "pong\n");
    task.abort();
    e.api.s.delete(&e.pod_path("web"), Some(1));
    e.wait_gone(&e.pod_path("web"), 30).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_client_ca_only_healthz_answers() {
    if !common::require_root() {
        return;
    }
    let pki = pki();
    let e = env().await;
    e.wait(&e.node_path(), "a registered node", 30, |v| {
        !v["status"].is_null()
    })
    .await;
    let c = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .build()
        .unwrap();
    assert_eq!(get(&c, &e, "/healthz").await, (200, "ok\n".into()));
    assert_eq!(get(&c, &e, "/pods").await.0, 401);
    // The self-signed serving certificate is kept for the next start.
    assert!(e.k.root().join("pki/kubelet.crt").exists());
    drop(pki);
}
