//! `husk kubelet` speaking cri-api v0.36 to a real husk serve: an image
//! volume (pulled by its pull policy, mounted whole and by subPath) and a
//! container's `lifecycle.stopSignal`, which the process receives when the
//! pod goes.
#![allow(clippy::unwrap_used)]

mod common;

use common::images::*;
use common::kubelet::*;
use common::pod;
use husk::api::cri::{ListContainersRequest, Signal};

#[tokio::test(flavor = "multi_thread")]
async fn image_volumes_and_stop_signals_from_a_pod_spec() {
    if !common::require_root() {
        return;
    }
    let p = pod::setup(vec![]).await;
    let push = Pusher::new(&p.reg);
    let img = Image::new(vec![Layer::new(&busybox_entries(), Compression::Gzip)]);
    push.image("test/busybox", "1", &img, Format::Oci).await;
    let data = Image::new(vec![Layer::new(
        &[
            Entry::Dir("data".into(), 0o755),
            Entry::Dir("data/sub".into(), 0o755),
            Entry::File("data/hello.txt".into(), b"hello\n".to_vec(), 0o644),
            Entry::File("data/sub/deep.txt".into(), b"deep\n".to_vec(), 0o644),
        ],
        Compression::Gzip,
    )]);
    push.image("test/data", "1", &data, Format::Oci).await;
    let (image, data) = (
        format!("{}/test/busybox:1", p.reg.host()),
        format!("{}/test/data:1", p.reg.host()),
    );
    let out = tempfile::tempdir().unwrap();
    let k = Kubelet::start(&p.h.endpoint(), &p.cgroup_parent);
    k.write(
        "cri136.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: cri136
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 20
  containers:
  - name: reader
    image: {image}
    command: [sh, -c, "cat /d/data/hello.txt /s/deep.txt; touch /d/x 2>/dev/null || echo read-only"]
    volumeMounts:
    - {{name: data, mountPath: /d}}
    - {{name: data, mountPath: /s, subPath: data/sub}}
  - name: sig
    image: {image}
    command: [sh, -c, "trap 'echo got-USR1 > /out/got; exit 0' USR1; trap 'echo got-TERM > /out/got; exit 0' TERM; while true; do sleep 0.1; done"]
    lifecycle:
      stopSignal: SIGUSR1
    volumeMounts: [{{name: out, mountPath: /out}}]
  volumes:
  - name: data
    image: {{reference: "{data}", pullPolicy: IfNotPresent}}
  - name: out
    hostPath: {{path: "{}"}}
"#,
            out.path().display()
        ),
    );
    let v = k
        .wait("cri136", "the reader done and sig running", 90, |v| {
            !container(v, "reader")["state"]["terminated"].is_null() && running(v, "sig")
        })
        .await;
    assert_eq!(
        container(&v, "reader")["state"]["terminated"]["exitCode"],
        0,
        "{v}"
    );
    assert_eq!(logs(&k, &v, "reader"), ["hello", "deep", "read-only"]);
    // The kubelet pulled the volume's image itself.
    assert!(p.h.status(&data).await.is_some());
    // The runtime was given the container's stop signal.
    let mut rt = p.h.runtime().await;
    let sig = rt
        .list_containers(ListContainersRequest::default())
        .await
        .unwrap()
        .into_inner()
        .containers
        .into_iter()
        .find(|c| c.metadata.as_ref().unwrap().name == "sig")
        .unwrap();
    let st = common::ctr::container_status(&p.h, &sig.id).await;
    assert_eq!(st.stop_signal, Signal::Sigusr1 as i32);
    // The pod goes: its process gets SIGUSR1, not SIGTERM.
    k.remove("cri136.yaml");
    k.wait_gone("cri136", 60).await;
    assert_eq!(
        std::fs::read_to_string(out.path().join("got")).unwrap(),
        "got-USR1\n"
    );
    assert!(common::mounts_under(&p.h.root())
        .iter()
        .all(|m| !m.contains("image-volumes")));
}
