//! `husk kubelet` and `husk run` through the whole pod flow, against a
//! real `husk serve` (and, where practical, Debian's containerd 1.6):
//! init containers in order, crash-loop back-off, liveness restarts,
//! readiness gating Ready, every pull policy, edited and deleted
//! manifests (preStop), bad manifests, adoption by a restarted kubelet,
//! emptyDir shared by two containers, and a hostPort from 127.0.0.1.
#![allow(clippy::unwrap_used)]

mod common;

use common::images::*;
use common::kubelet::*;
use common::pod::{self, Pod};
use serde_json::Value;
use std::time::Duration;

/// A husk serve with a registry holding `test/busybox:1` and `:latest`,
/// and a kubelet driving it. The kubelet goes first on drop, so it tears
/// its pods down while the runtime is still there.
struct Env {
    k: Kubelet,
    p: Pod,
    image: String,
}

fn app_image() -> Image {
    Image::new(vec![Layer::new(&busybox_entries(), Compression::Gzip)])
}

async fn push_app(p: &Pod) -> String {
    let pusher = Pusher::new(&p.reg);
    let img = app_image();
    pusher.image("test/busybox", "1", &img, Format::Oci).await;
    pusher
        .image("test/busybox", "latest", &img, Format::Oci)
        .await;
    format!("{}/test/busybox:1", p.reg.host())
}

async fn husk_env() -> Env {
    let p = pod::setup(vec![]).await;
    let image = push_app(&p).await;
    let k = Kubelet::start(&p.h.endpoint(), &p.cgroup_parent);
    Env { k, p, image }
}

/// Sandboxes the runtime holds for a pod UID (any state).
async fn sandboxes(endpoint: &str, uid: &str) -> usize {
    let ch = husk::cli::connect(endpoint).await.unwrap();
    let mut rt = husk::api::cri::runtime_service_client::RuntimeServiceClient::new(ch);
    rt.list_pod_sandbox(husk::api::cri::ListPodSandboxRequest {
        filter: Some(husk::api::cri::PodSandboxFilter {
            label_selector: [("io.kubernetes.pod.uid".to_string(), uid.to_string())].into(),
            ..Default::default()
        }),
    })
    .await
    .unwrap()
    .into_inner()
    .items
    .len()
}

fn uid(v: &Value) -> String {
    v["metadata"]["uid"].as_str().unwrap().to_string()
}

fn started_at(c: &Value, state: &str) -> String {
    c[state]["terminated"]["startedAt"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

fn init_pod(image: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: init
spec:
  restartPolicy: Never
  initContainers:
  - name: first
    image: {image}
    command: [sh, -c, "echo one >> /work/order"]
    volumeMounts: [{{name: work, mountPath: /work}}]
  - name: second
    image: {image}
    command: [sh, -c, "sleep 1; echo two >> /work/order"]
    volumeMounts: [{{name: work, mountPath: /work}}]
  containers:
  - name: app
    image: {image}
    command: [sh, -c, "cat /work/order"]
    volumeMounts: [{{name: work, mountPath: /work}}]
  volumes:
  - name: work
    emptyDir: {{}}
"#
    )
}

async fn init_containers_in_order(e: &Kubelet, image: &str) {
    e.write("init.yaml", &init_pod(image));
    let v = e
        .wait("init", "Succeeded", 90, |v| phase(v) == "Succeeded")
        .await;
    let first = container(&v, "first");
    let second = container(&v, "second");
    assert_eq!(first["state"]["terminated"]["exitCode"], 0);
    assert_eq!(second["state"]["terminated"]["exitCode"], 0);
    assert_eq!(
        container(&v, "app")["state"]["terminated"]["reason"],
        "Completed"
    );
    // Each init container ran to success before the next started.
    let first_done = first["state"]["terminated"]["finishedAt"]
        .as_str()
        .unwrap()
        .to_string();
    let second_start = started_at(second, "state");
    assert!(first_done <= second_start, "{first_done} > {second_start}");
    assert!(condition(&v, "Initialized"));
    assert_eq!(logs(e, &v, "app"), vec!["one", "two"]);
    assert_eq!(
        container(&v, "app")["containerID"]
            .as_str()
            .unwrap()
            .split("://")
            .count(),
        2
    );
    e.remove("init.yaml");
    e.wait_gone("init", 60).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn init_containers_run_in_order() {
    if !common::require_root() {
        return;
    }
    let e = husk_env().await;
    init_containers_in_order(&e.k, &e.image).await;
    assert_eq!(sandboxes(&e.p.h.endpoint(), "x").await, 0);
}
