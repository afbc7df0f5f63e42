//! `husk kubelet` against a pod that attacks its own volume (the
//! CVE-2017-1002101 class): an init container plants symlinks out of an
//! emptyDir, and the next containers mount them by subPath. The kubelet
//! refuses the escaping ones (CreateContainerConfigError) and mounts the
//! one that stays inside; the node's files are never reached.
#![allow(clippy::unwrap_used)]

mod common;

use common::images::*;
use common::kubelet::*;
use common::pod;

#[tokio::test(flavor = "multi_thread")]
async fn subpath_symlinks_out_of_the_volume_are_refused() {
    if !common::require_root() {
        return;
    }
    let p = pod::setup(vec![]).await;
    let img = Image::new(vec![Layer::new(&busybox_entries(), Compression::Gzip)]);
    Pusher::new(&p.reg)
        .image("test/busybox", "1", &img, Format::Oci)
        .await;
    let image = format!("{}/test/busybox:1", p.reg.host());
    let k = Kubelet::start(&p.h.endpoint(), &p.cgroup_parent);
    let marker = format!("/tmp/husk-subpath-{:08x}", rand::random::<u32>());
    k.write(
        "subpath.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: subpath
spec:
  restartPolicy: Never
  initContainers:
  - name: plant
    image: {image}
    command: [sh, -c, "ln -s / /v/abs && ln -s ../../../../../../.. /v/up && mkdir /v/ok && echo inside > /v/ok/f && ln -s ok /v/alias"]
    volumeMounts: [{{name: v, mountPath: /v}}]
  containers:
  - name: abs
    image: {image}
    command: [sh, -c, "echo pwned > /host{marker}"]
    volumeMounts: [{{name: v, mountPath: /host, subPath: abs}}]
  - name: up
    image: {image}
    command: [sh, -c, "echo pwned > /host{marker}"]
    volumeMounts: [{{name: v, mountPath: /host, subPath: up}}]
  - name: inside
    image: {image}
    command: [sh, -c, "cat /ok/f /alias/f"]
    volumeMounts:
    - {{name: v, mountPath: /ok, subPath: ok}}
    - {{name: v, mountPath: /alias, subPath: alias}}
  volumes:
  - name: v
    emptyDir: {{}}
"#
        ),
    );
    let v = k
        .wait("subpath", "the escaping containers refused", 90, |v| {
            ["abs", "up"]
                .iter()
                .all(|c| waiting_reason(v, c) == "CreateContainerConfigError")
                && !container(v, "inside")["state"]["terminated"].is_null()
        })
        .await;
    for c in ["abs", "up"] {
        let msg = container(&v, c)["state"]["waiting"]["message"]
            .as_str()
            .unwrap_or("");
        assert!(msg.contains("leaves the volume"), "{c}: {msg}");
    }
    assert_eq!(
        container(&v, "inside")["state"]["terminated"]["exitCode"],
        0,
        "{v}"
    );
    assert_eq!(logs(&k, &v, "inside"), ["inside", "inside"]);
    assert!(
        !std::path::Path::new(&marker).exists(),
        "the node's /tmp was written"
    );
    k.remove("subpath.yaml");
    k.wait_gone("subpath", 60).await;
    // The subPath binds went with the pod's directory.
    assert!(
        common::mounts_under(&k.root()).is_empty(),
        "{:?}",
        common::mounts_under(&k.root())
    );
}
