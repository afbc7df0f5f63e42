//! husk kubelet's node managers on cgroup v2 and Debian 12's kernel: the
//! pod and QoS cgroups (`cpu.weight`, `cpu.max`, `memory.max`) bound a
//! pod's containers together, and an OOM kill read from this kernel's
//! `/dev/kmsg` is a node event. The same scenarios run on the host in
//! `tests/kubelet_managers.rs`.

use super::*;

#[tokio::test(flavor = "multi_thread")]
#[ignore = "runs in the node VM (cgroup_v2_node)"]
async fn guest_kubelet_pod_cgroups_and_oom_events() {
    common::managers::pod_cgroups_bound_the_pods_containers_together().await;
    common::managers::an_oom_kill_is_a_node_event().await;
    // No systemd here: its driver is refused at start, with the reason.
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_husk"))
        .args(["kubelet", "--cgroup-driver", "systemd", "--manifests"])
        .arg(dir.path())
        .arg("--root")
        .arg(dir.path().join("root"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("systemd is not reachable over D-Bus"), "{err}");
}
