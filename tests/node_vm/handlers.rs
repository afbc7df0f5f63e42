//! OCI runtime handlers on the node shapes: Debian's crun (which refuses
//! the host's hybrid cgroup layout) and runc on cgroup v2 under the
//! cgroupfs driver, and runc under the systemd driver with systemd as PID
//! 1: a pod's limits seen from inside, an exec, an OOM kill reported, a
//! stop's exit code, and nothing left (cgroups, scopes, the runtime's
//! state).

use super::*;
use common::ctr::{app_image, ccfg, create_start, shell, wait_exited};
use common::pod::{leftovers, run_under, runtime_state, setup_config};

/// crun beside the built-in runc; both with the longest call timeout
/// (one emulated CPU: a Go runtime's first start in a fresh guest can
/// take seconds).
const CONFIG: &str = r#"
[runtimes.crun]
type = "oci"
path = "crun"
timeout_secs = 20

[runtimes.runc]
type = "oci"
path = "runc"
timeout_secs = 20
"#;

fn limited(image: &str, name: &str, script: &str, memory: i64) -> ContainerConfig {
    let mut c = shell(image, name, script, &[]);
    c.linux.as_mut().unwrap().resources = Some(LinuxContainerResources {
        memory_limit_in_bytes: memory,
        memory_swap_limit_in_bytes: memory,
        ..Default::default()
    });
    c
}

/// One pod under `handler`: limits inside, an exec, an OOM kill, a stop.
async fn a_pod_under(p: &Pod, image: &str, handler: &str, parent: &str) {
    let pc = pod_under(p, &format!("oci-{handler}"), parent);
    let pod = run_under(&p.h, pc.clone(), handler).await.unwrap();
    assert!(
        runtime_state(p, handler).contains(&pod),
        "the pause is {handler}'s"
    );
    let script = "trap 'exit 9' TERM; while true; do sleep 0.1; done";
    let id = create_start(&p.h, &pod, &pc, limited(image, "web", script, 64 << 20)).await;
    assert!(runtime_state(p, handler).contains(&id));
    assert_eq!(
        out(&p.h, &id, "cat /sys/fs/cgroup/memory.max").await,
        "67108864"
    );
    assert_eq!(out(&p.h, &id, "cat /proc/self/cgroup").await, "0::/");
    let (code, o, _) = sh(&p.h, &id, "echo in; exit 4").await;
    assert_eq!((code, o.as_str()), (4, "in"));

    let hog = create_start(
        &p.h,
        &pod,
        &pc,
        limited(image, "hog", "tail /dev/zero", 16 << 20),
    )
    .await;
    let st = wait_exited(&p.h, &hog).await;
    assert_eq!(
        (st.reason.as_str(), st.exit_code),
        ("OOMKilled", 137),
        "{st:?}"
    );

    let mut rt = p.h.runtime().await;
    rt.stop_container(StopContainerRequest {
        container_id: id.clone(),
        timeout: 10,
    })
    .await
    .unwrap();
    let st = wait_exited(&p.h, &id).await;
    assert_eq!(st.exit_code, 9, "{st:?}");
    common::pod::remove_listed(p).await;
    assert_eq!(runtime_state(p, handler), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "runs in the node VM (cgroup_v2_node)"]
async fn guest_oci_handlers_crun_and_runc() {
    guest();
    let mut p = setup_config(vec![], "/usr/lib/cni", vec![], CONFIG).await;
    let parent = kubelet_parent(&mut p);
    let image = app_image(&p).await;
    let names: Vec<String> =
        p.h.runtime_status()
            .await
            .runtime_handlers
            .into_iter()
            .map(|h| h.name)
            .collect();
    assert_eq!(names, ["", "crun", "husk", "runc"]);
    for handler in ["crun", "runc"] {
        a_pod_under(&p, &image, handler, &parent).await;
    }
    assert_eq!(leftovers(&p), Vec::<String>::new());
    assert_eq!(child_cgroups(&v2_dir(&parent)), Vec::<String>::new());
    remove_parent(&parent);
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "runs in the systemd node VM (systemd_node)"]
async fn in_systemd_vm_oci_handler_scopes() {
    guest();
    assert_eq!(read(Path::new("/proc/1/comm")), "systemd");
    let p = setup_config(
        vec![],
        "/usr/lib/cni",
        vec!["--cgroup-driver".into(), "systemd".into()],
        CONFIG,
    )
    .await;
    let image = app_image(&p).await;
    let slice = super::systemd::pod_slice(None);
    for handler in ["runc", "crun"] {
        let pc = pod_under(&p, &format!("sd-{handler}"), &slice);
        let pod = run_under(&p.h, pc.clone(), handler).await.unwrap();
        let id = create_start(&p.h, &pod, &pc, ccfg(&image, "c", &["sleep", "3600"], &[])).await;
        // The runtime made the scopes through systemd, in the pod's
        // slice, where husk's own path makes them.
        for unit in [format!("husk-{pod}.scope"), format!("husk-{id}.scope")] {
            assert_eq!(
                super::systemd::prop(&unit, "ActiveState"),
                "active",
                "{handler}: {unit}"
            );
            assert_eq!(
                super::systemd::prop(&unit, "Slice"),
                slice,
                "{handler}: {unit}"
            );
        }
        common::pod::remove_listed(&p).await;
        assert_eq!(runtime_state(&p, handler), Vec::<String>::new());
    }
    assert_eq!(leftovers(&p), Vec::<String>::new());
    super::systemd::drop_slice(&slice);
}
