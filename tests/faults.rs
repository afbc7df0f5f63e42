//! Fault injection: the parts husk depends on misbehave (a CNI plugin that
//! hangs, prints garbage or leaves a child behind), and each time the
//! failing call answers clearly, the server keeps serving, and nothing is
//! left on the host. The faulty plugin is a script chained after the real
//! bridge, host-local and portmap plugins, so the real ones have attached
//! the pod when it fails and must be unwound.
#![allow(clippy::unwrap_used)]

mod common;

use common::pod::*;
use husk::api::cri::*;
use std::path::Path;
use std::time::Duration;

/// A unique sleep, to count the plugin's processes by.
const SLEEP: &str = "8642.5";

const PLUGIN: &str = r#"#!/bin/sh
dir=$(dirname "$0")
mode=$(cat "$dir/faulty.mode" 2>/dev/null)
input=$(cat)
case "$CNI_COMMAND:$mode" in
  ADD:hang|DEL:hang-del) sleep SLEEP ;;
  ADD:garbage) echo 'not json {'; echo 'the plugin broke' >&2; exit 1 ;;
  ADD:garbage-ok) echo 'not json {'; exit 0 ;;
  ADD:orphan) sleep SLEEP & ;;
esac
case "$CNI_COMMAND" in
  ADD) printf '%s' "$input" | jq -c '.prevResult' ;;
  VERSION) echo '{"cniVersion":"1.0.0","supportedVersions":["1.0.0"]}' ;;
esac
exit 0
"#;

fn set_mode(dir: &Path, mode: &str) {
    std::fs::write(dir.join("faulty.mode"), mode).unwrap();
}

fn plugin_processes() -> usize {
    let out = std::process::Command::new("pgrep")
        .args(["-f", &format!("sleep {SLEEP}")])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).lines().count()
}

async fn clean(p: &Pod, what: &str) {
    for _ in 0..100 {
        if leftovers(p).is_empty() && plugin_processes() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(leftovers(p), Vec::<String>::new(), "{what}");
    assert_eq!(plugin_processes(), 0, "{what}: plugin processes left");
}

#[tokio::test(flavor = "multi_thread")]
async fn cni_plugin_that_hangs_fails_or_leaves_children() {
    if !common::require_root() {
        return;
    }
    let bin = tempfile::tempdir().unwrap();
    let script = bin.path().join("faulty");
    common::write_executable(&script, &PLUGIN.replace("SLEEP", SLEEP));
    let p = setup_with(
        vec![serde_json::json!({"type": "faulty"})],
        &format!("{}:/usr/lib/cni", bin.path().display()),
        vec!["--cni-plugin-timeout".into(), "2".into()],
    )
    .await;

    // ADD hangs: killed at the deadline, DeadlineExceeded naming the
    // plugin, the real plugins' attachment undone.
    set_mode(bin.path(), "hang");
    let e = run(&p.h, p.config("hang")).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::DeadlineExceeded, "{e:?}");
    assert!(e.message().contains("faulty"), "{}", e.message());
    clean(&p, "after a hung ADD").await;

    // Garbage and a failure code: Internal with the plugin's words.
    set_mode(bin.path(), "garbage");
    let e = run(&p.h, p.config("garbage")).await.unwrap_err();
    assert!(e.message().contains("the plugin broke"), "{}", e.message());
    clean(&p, "after a failed ADD").await;

    // Garbage with success: the result does not parse; unwound.
    set_mode(bin.path(), "garbage-ok");
    let e = run(&p.h, p.config("garbage-ok")).await.unwrap_err();
    assert!(e.message().contains("faulty"), "{}", e.message());
    clean(&p, "after an unparsable result").await;

    // A plugin that leaves a child holding its stdout: the call still
    // returns, and the child is gone with the plugin's process group.
    set_mode(bin.path(), "orphan");
    let id = run(&p.h, p.config("orphan")).await.unwrap();
    assert_eq!(plugin_processes(), 0, "the plugin's child was killed");

    // DEL hangs: StopPodSandbox fails at the deadline and the pod stays
    // listed; the next StopPodSandbox retries DEL and succeeds.
    set_mode(bin.path(), "hang-del");
    let mut rt = p.h.runtime().await;
    let e = rt
        .stop_pod_sandbox(StopPodSandboxRequest {
            pod_sandbox_id: id.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::DeadlineExceeded, "{e:?}");
    assert_eq!(status(&p.h, &id).await.unwrap().status.unwrap().id, id);
    set_mode(bin.path(), "ok");
    rt.stop_pod_sandbox(StopPodSandboxRequest {
        pod_sandbox_id: id.clone(),
    })
    .await
    .unwrap();
    rt.remove_pod_sandbox(RemovePodSandboxRequest {
        pod_sandbox_id: id.clone(),
    })
    .await
    .unwrap();
    clean(&p, "after a hung DEL retried").await;

    // The missing-plugin case is in sandbox.rs (failures_unwind_everything).
    // Through all of it the server kept serving: a good pod runs.
    let id = run(&p.h, p.config("fine")).await.unwrap();
    rt.remove_pod_sandbox(RemovePodSandboxRequest { pod_sandbox_id: id })
        .await
        .unwrap();
    clean(&p, "after a good pod").await;
}

/// A kubelet whose RunPodSandbox deadline passes goes while the pod is
/// being made (here: while a CNI ADD hangs until the plugin's deadline).
/// The pod is still made or unwound to its end, and its name is released
/// when it fails: the kubelet's retry, under the same name, gets the
/// plugin's own error, never "name is reserved" for a pod that is not there.
#[tokio::test(flavor = "multi_thread")]
async fn a_caller_gone_mid_run_leaves_no_name_reserved() {
    if !common::require_root() {
        return;
    }
    let bin = tempfile::tempdir().unwrap();
    common::write_executable(&bin.path().join("faulty"), &PLUGIN.replace("SLEEP", SLEEP));
    let p = setup_with(
        vec![serde_json::json!({"type": "faulty"})],
        &format!("{}:/usr/lib/cni", bin.path().display()),
        vec!["--cni-plugin-timeout".into(), "2".into()],
    )
    .await;
    set_mode(bin.path(), "hang");
    let gone = tokio::time::timeout(Duration::from_millis(500), run(&p.h, p.config("gone"))).await;
    assert!(
        gone.is_err(),
        "the caller went before the pod was made: {gone:?}"
    );

    // While the ADD still hangs the name is the first call's; once the
    // plugin is killed at its deadline, the pod unwinds and frees it.
    set_mode(bin.path(), "garbage");
    let mut last = None;
    for _ in 0..300 {
        match run(&p.h, p.config("gone")).await {
            Err(e) if e.code() == tonic::Code::AlreadyExists => {
                last = Some(e);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => {
                let e = other.expect_err("the plugin still fails");
                assert!(e.message().contains("the plugin broke"), "{}", e.message());
                last = None;
                break;
            }
        }
    }
    assert!(last.is_none(), "the name stayed reserved: {last:?}");
    clean(&p, "after a caller gone mid-run").await;

    // The server kept serving: a good pod runs.
    set_mode(bin.path(), "ok");
    let id = run(&p.h, p.config("made")).await.unwrap();
    let mut rt = p.h.runtime().await;
    rt.remove_pod_sandbox(RemovePodSandboxRequest { pod_sandbox_id: id })
        .await
        .unwrap();
    clean(&p, "after a good pod").await;
}

/// An image with one 6 MiB incompressible layer, pushed as `repo:v1`.
async fn big_layer_image(reg: &common::registry::Registry, repo: &str) -> common::images::Image {
    use common::images::*;
    let img = Image::new(vec![Layer::new(
        &[Entry::File("blob".into(), random_bytes(6 << 20, 7), 0o644)],
        Compression::Gzip,
    )]);
    Pusher::new(reg).image(repo, "v1", &img, Format::Oci).await;
    img
}

/// Nothing of a failed pull is kept: no image, no ingest, no apply mount.
async fn no_partial_image(h: &common::server::Husk, what: &str) {
    assert!(h.list().await.is_empty(), "{what}: no image listed");
    assert_eq!(
        common::count_files(&h.root().join("content/ingest")),
        0,
        "{what}: ingest"
    );
    let root = h.root().display().to_string();
    let mounts: Vec<String> = common::mounts_under(&h.root())
        .into_iter()
        .filter(|m| *m != root)
        .collect();
    assert!(mounts.is_empty(), "{what}: mounts {mounts:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn registry_that_resets_stalls_or_oversends() {
    use common::{fault_proxy, Fault};
    if !common::require_root() {
        return;
    }
    let reg = common::registry::Registry::start();
    let img = big_layer_image(&reg, "faulty/app").await;
    let h =
        common::server::Husk::start_with(vec!["--registry-stall-timeout".into(), "2".into()]).await;

    // The connection is reset 1 MiB into the layer: Unavailable, naming
    // the blob's URL; nothing kept.
    let (port, _p) = fault_proxy(reg.port, Fault::Reset { after: 1 << 20 }).await;
    let e = h
        .pull(&format!("127.0.0.1:{port}/faulty/app:v1"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
    assert!(e.message().contains("/blobs/sha256:"), "{}", e.message());
    no_partial_image(&h, "after a reset").await;

    // The registry stops sending: DeadlineExceeded after the stall timeout.
    let (port, _p) = fault_proxy(reg.port, Fault::Stall { after: 1 << 20 }).await;
    let e = h
        .pull(&format!("127.0.0.1:{port}/faulty/app:v1"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::DeadlineExceeded, "{e:?}");
    assert!(e.message().contains("no data for"), "{}", e.message());
    no_partial_image(&h, "after a stall").await;

    // A blob longer than its descriptor says: refused before it is kept.
    let (m, mt) = img.manifest(common::images::Format::Oci);
    let mut v: serde_json::Value = serde_json::from_slice(&m).unwrap();
    let size = v["layers"][0]["size"].as_u64().unwrap();
    v["layers"][0]["size"] = (size - 1).into();
    common::images::Pusher::new(&reg)
        .manifest("faulty/app", "short", &serde_json::to_vec(&v).unwrap(), mt)
        .await;
    let e = h
        .pull(&format!("{}/faulty/app:short", reg.host()))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("size"), "{}", e.message());
    no_partial_image(&h, "after an oversized blob").await;

    // The registry healthy again: the same pull works.
    let id = h
        .pull(&format!("{}/faulty/app:v1", reg.host()))
        .await
        .unwrap();
    assert_eq!(id, img.config_digest());
}

/// A tmpfs of `size` mounted at `dir` (created), unmounted on drop.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).unwrap();
        let st = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .unwrap();
        assert!(st.success());
        Tmpfs(dir.to_path_buf())
    }

    /// Fills it with `filler`, to the last byte.
    fn fill(&self) -> std::path::PathBuf {
        use std::io::Write;
        let p = self.0.join("filler");
        let mut f = std::fs::File::create(&p).unwrap();
        let chunk = vec![0u8; 64 << 10];
        while f.write_all(&chunk).is_ok() {}
        while f.write_all(&[0]).is_ok() {}
        p
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = rustix::mount::unmount(&self.0, rustix::mount::UnmountFlags::DETACH);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_disk_fails_the_pull_and_drops_log_lines() {
    if !common::require_root() {
        return;
    }
    // The pull: the image store on a full tmpfs.
    let reg = common::registry::Registry::start();
    let img = big_layer_image(&reg, "full/app").await;
    let mut h = common::server::Husk::start().await;
    // The server again, its root now a 64 MiB tmpfs.
    h.kill9();
    let root = Tmpfs::mount(&h.root(), "64m");
    h.spawn().await;
    let filler = root.fill();
    let r = format!("{}/full/app:v1", reg.host());
    let e = h.pull(&r).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
    assert!(e.message().contains("No space left"), "{}", e.message());
    no_partial_image(&h, "after a full disk").await;
    // Space freed: the next pull works.
    std::fs::remove_file(&filler).unwrap();
    assert_eq!(h.pull(&r).await.unwrap(), img.config_digest());
    drop(h);

    // The log: a container writing to a log directory on a full tmpfs.
    let p = setup(vec![]).await;
    let image = common::ctr::app_image(&p).await;
    let logs = Tmpfs::mount(&p.h.dir.path().join("logs"), "1m");
    let mut pc = common::ctr::pod_config(&p, "noisy");
    pc.log_directory = logs.0.display().to_string();
    let pod = run(&p.h, pc.clone()).await.unwrap();
    let c = common::ctr::create_start(
        &p.h,
        &pod,
        &pc,
        common::ctr::ccfg(
            &image,
            "noisy",
            &[],
            &["p=$(printf '%0200d' 0); i=0; while true; do echo tick $i $p; i=$((i+1)); sleep 0.02; done"],
        ),
    )
    .await;
    let log = logs.0.join("noisy/0.log");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let filler = logs.fill();
    // The log file's last page fills first.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let full_at = std::fs::metadata(&log).unwrap().len();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        std::fs::metadata(&log).unwrap().len(),
        full_at,
        "nothing fits"
    );
    let st = common::ctr::container_status(&p.h, &c).await;
    assert_eq!(
        st.state,
        ContainerState::ContainerRunning as i32,
        "the container runs on"
    );
    // Space again: a marker counts what was lost, then the lines go on.
    std::fs::remove_file(&filler).unwrap();
    let mut text = String::new();
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        text = std::fs::read_to_string(&log).unwrap();
        if text.lines().last().is_some_and(|l| l.contains("tick")) && text.contains("dropped") {
            break;
        }
    }
    // Every lost line is counted by a marker: the ticks missing from the
    // log are exactly the sum of the markers' counts. (A page of slack can
    // take a short marker while a longer record did not fit, so there may
    // be several.)
    let dropped: u64 = text
        .lines()
        .filter_map(|l| l.split("[husk: ").nth(1))
        .filter(|m| m.contains("log records dropped: no space left on device"))
        .map(|m| m.split(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    let ticks: Vec<u64> = text
        .lines()
        .filter_map(|l| l.split(" tick ").nth(1))
        .map(|t| t.split(' ').next().unwrap().parse().unwrap())
        .collect();
    let last = *ticks.last().unwrap();
    assert!(dropped > 5, "{text}");
    assert_eq!(dropped, last + 1 - ticks.len() as u64, "{text}");
    // Every record is whole (no torn line from a half-written record).
    for l in text.lines() {
        assert!(husk::logs::parse_line(l.as_bytes()).is_some(), "{l:?}");
    }
    remove_listed(&p).await;
    drop(logs);
    assert_eq!(leftovers(&p), Vec::<String>::new());
}

fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap()
        .parse()
        .unwrap()
}

fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    f.extend_from_slice(&[kind, flags]);
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A gRPC call that asks for an answer and never reads it: the client's
/// window is 0, so nothing of the answer can be sent.
fn never_reading_call(path: &str) -> Vec<u8> {
    let mut b = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    // SETTINGS_INITIAL_WINDOW_SIZE = 0.
    b.extend(h2_frame(4, 0, 0, &[0, 4, 0, 0, 0, 0]));
    let lit = |idx: u8, v: &[u8]| {
        let mut x = vec![idx, v.len() as u8];
        x.extend_from_slice(v);
        x
    };
    let mut h = lit(1, b"localhost");
    h.extend_from_slice(&[0x83, 0x86]);
    h.extend(lit(4, path.as_bytes()));
    h.extend_from_slice(&[0x0f, 0x10, 16]);
    h.extend_from_slice(b"application/grpc");
    h.extend_from_slice(b"\x00\x02te\x08trailers");
    b.extend(h2_frame(1, 4, 1, &h));
    b.extend(h2_frame(0, 1, 1, &[0, 0, 0, 0, 0]));
    b
}

#[tokio::test(flavor = "multi_thread")]
async fn idle_connections_stuck_readers_and_an_oversized_request() {
    use tokio::io::AsyncWriteExt;
    if !common::require_root() {
        return;
    }
    // Room for the connections, here and in the server (which inherits it).
    let lim = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    rustix::process::setrlimit(
        rustix::process::Resource::Nofile,
        rustix::process::Rlimit {
            current: lim.maximum.map(|m| m.min(8192)).or(Some(8192)),
            maximum: lim.maximum,
        },
    )
    .unwrap();
    let h = common::server::Husk::start().await;
    h.list().await;
    let before = rss_kb(h.pid());

    // 1,000 connections that never send a byte, 50 that never read.
    let mut idle = Vec::new();
    for _ in 0..1000 {
        idle.push(tokio::net::UnixStream::connect(h.socket()).await.unwrap());
    }
    let mut stuck = Vec::new();
    for _ in 0..50 {
        let mut s = tokio::net::UnixStream::connect(h.socket()).await.unwrap();
        s.write_all(&never_reading_call("/runtime.v1.ImageService/ListImages"))
            .await
            .unwrap();
        stuck.push(s);
    }
    // Others are served meanwhile.
    for _ in 0..20 {
        h.list().await;
    }
    // A 100 MiB request: refused as gRPC says, ResourceExhausted.
    let e = h
        .images()
        .await
        .pull_image(PullImageRequest {
            image: Some(ImageSpec {
                image: "x".repeat(100 << 20),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{}", e.message());
    h.list().await;
    let during = rss_kb(h.pid());
    // Bounded: a connection costs tens of kB, not megabytes; the refused
    // 100 MiB request is not kept.
    assert!(
        during < before + 96 * 1024,
        "RSS grew from {before} kB to {during} kB"
    );
    drop(idle);
    drop(stuck);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let fds = std::fs::read_dir(format!("/proc/{}/fd", h.pid()))
        .unwrap()
        .count();
    assert!(fds < 100, "{fds} fds still open in the server");
    h.list().await;
}
