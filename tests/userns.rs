//! User namespace options (`hostUsers`), through a real `husk serve`.
//!
//! Every malformed request is InvalidArgument with its reason (the
//! refusals critest checks and containerd makes), and nothing is left
//! behind; mode NODE, which the kubelet sends for every ordinary pod, runs
//! with the node's users. The pod user namespace itself (mode POD) is in
//! `userns_pod.rs`.
#![allow(clippy::unwrap_used)]

mod common;

use common::ctr::{app_image, ccfg, create_start, pod_config, stop_remove_pod};
use common::pod::*;
use common::userns::*;
use husk::api::cri::*;

#[tokio::test(flavor = "multi_thread")]
async fn bad_options_are_invalid_with_nothing_left() {
    if !common::require_root() {
        return;
    }
    let p = setup(vec![]).await;
    let image = app_image(&p).await;
    // As the kubelet maps a hostUsers: false pod: 65536 ids above 65535.
    let ok = || vec![map(0, 65536 * 2, 65536)];

    // Malformed: InvalidArgument naming what is wrong.
    let two = vec![map(0, 65536, 65536), map(0, 131072, 65536)];
    let bad = [
        (
            "two uid mappings",
            userns(NamespaceMode::Pod, two, ok()),
            "only one uid mapping",
        ),
        (
            "root not mapped",
            userns(NamespaceMode::Pod, vec![map(1, 65536, 65536)], ok()),
            "must map the pod's root",
        ),
        (
            "CONTAINER",
            userns(NamespaceMode::Container, vec![], vec![]),
            "CONTAINER",
        ),
        (
            "TARGET",
            userns(NamespaceMode::Target, vec![], vec![]),
            "TARGET",
        ),
        (
            "NODE with mappings",
            userns(NamespaceMode::Node, ok(), ok()),
            "mode NODE takes no",
        ),
        (
            "POD without mappings",
            userns(NamespaceMode::Pod, vec![], vec![]),
            "mode POD needs",
        ),
        (
            "empty range",
            userns(NamespaceMode::Pod, ok(), vec![map(0, 65536, 0)]),
            "length 0",
        ),
        (
            "overflowing range",
            userns(NamespaceMode::Pod, vec![map(0, u32::MAX - 10, 65536)], ok()),
            "past the largest id",
        ),
    ];
    for (what, u, reason) in bad {
        let st = run(&p.h, with_userns(pod_config(&p, "userns-bad"), u))
            .await
            .unwrap_err();
        assert_eq!(st.code(), tonic::Code::InvalidArgument, "{what}: {st:?}");
        assert!(st.message().contains(reason), "{what}: {st:?}");
    }
    // A pod user namespace owns the pod's network namespace: not with the
    // node's.
    let mut host_net = with_userns(
        pod_config(&p, "userns-hostnet"),
        userns(NamespaceMode::Pod, ok(), ok()),
    );
    let sc = host_net
        .linux
        .as_mut()
        .unwrap()
        .security_context
        .as_mut()
        .unwrap();
    sc.namespace_options.as_mut().unwrap().network = NamespaceMode::Node as i32;
    let st = run(&p.h, host_net).await.unwrap_err();
    assert_eq!(st.code(), tonic::Code::InvalidArgument, "{st:?}");
    assert!(st.message().contains("node's network"), "{st:?}");
    assert!(list_pods(&p).await.is_empty());
    assert_eq!(leftovers(&p), Vec::<String>::new());

    // Mode NODE, as the kubelet sends it for every ordinary pod, runs; the
    // name the refused pods asked for was never reserved.
    let pc = with_userns(
        pod_config(&p, "userns-pod"),
        userns(NamespaceMode::Node, vec![], vec![]),
    );
    let pod = run(&p.h, pc.clone()).await.unwrap();
    let mut c = ccfg(&image, "c", &["/bin/sleep", "600"], &[]);
    let node_opts = NamespaceOption {
        userns_options: Some(userns(NamespaceMode::Node, vec![], vec![])),
        ..Default::default()
    };
    common::ctr::security(&mut c).namespace_options = Some(node_opts);
    let id = create_start(&p.h, &pod, &pc, c.clone()).await;
    // The container runs with the node's users: the identity mapping.
    let out =
        p.h.runtime()
            .await
            .exec_sync(ExecSyncRequest {
                container_id: id.clone(),
                cmd: vec!["cat".into(), "/proc/self/uid_map".into()],
                timeout: 10,
            })
            .await
            .unwrap()
            .into_inner();
    let host_map = std::fs::read_to_string("/proc/self/uid_map").unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), host_map);

    // A container asking for mode POD (or malformed options) in that pod
    // is refused, and no container is made.
    let mut c2 = ccfg(&image, "c2", &["/bin/sleep", "600"], &[]);
    common::ctr::security(&mut c2).namespace_options = Some(NamespaceOption {
        userns_options: Some(userns(NamespaceMode::Pod, ok(), ok())),
        ..Default::default()
    });
    let st = common::ctr::try_create(&p.h, &pod, &pc, c2.clone())
        .await
        .unwrap_err();
    assert_eq!(st.code(), tonic::Code::InvalidArgument, "{st:?}");
    assert!(
        st.message().contains("runs with the node's users"),
        "{st:?}"
    );
    common::ctr::security(&mut c2).namespace_options = Some(NamespaceOption {
        userns_options: Some(userns(NamespaceMode::Target, vec![], vec![])),
        ..Default::default()
    });
    let st = common::ctr::try_create(&p.h, &pod, &pc, c2)
        .await
        .unwrap_err();
    assert_eq!(st.code(), tonic::Code::InvalidArgument, "{st:?}");
    assert_eq!(list_containers(&p).await.len(), 1);

    stop_remove_pod(&p.h, &pod).await;
    assert_eq!(leftovers(&p), Vec::<String>::new());
}
