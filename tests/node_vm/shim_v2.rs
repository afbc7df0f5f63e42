//! A shim v2 handler (containerd 2.3.4's runc shim, running runc 1.4.3) on
//! the node shapes: cgroup v2 under the cgroupfs driver, and the systemd
//! driver with systemd as PID 1 (the shim is told SystemdCgroup, so runc
//! makes the scopes): limits seen from inside, stats from the shim's v2
//! metrics, an update through it, an OOM kill reported, a stop's exit
//! code, and nothing left.

use super::*;
use common::ctr::{app_image, create_start, shell, wait_exited};
use common::pod::{leftovers, run_under, setup_config};

fn config() -> String {
    format!(
        r#"
[runtimes.runc-v2]
type = "shim"
runtime_type = "io.containerd.runc.v2"
path = "{}"
timeout_secs = 20
[runtimes.runc-v2.options]
BinaryName = "{}"
"#,
        common::shared("shims/containerd-shim-runc-v2").display(),
        common::shared("shims/runc-1.4.3").display(),
    )
}

fn limited(image: &str, name: &str, script: &str, memory: i64) -> ContainerConfig {
    let mut c = shell(image, name, script, &[]);
    c.linux.as_mut().unwrap().resources = Some(LinuxContainerResources {
        memory_limit_in_bytes: memory,
        memory_swap_limit_in_bytes: memory,
        ..Default::default()
    });
    c
}

/// One pod under the shim, left running with its web container stopped;
/// the pod's id.
async fn a_pod(p: &Pod, image: &str, pc: PodSandboxConfig) -> String {
    let pod = run_under(&p.h, pc.clone(), "runc-v2").await.unwrap();
    let script = "trap 'exit 9' TERM; while true; do sleep 0.1; done";
    let id = create_start(&p.h, &pod, &pc, limited(image, "web", script, 64 << 20)).await;
    assert_eq!(
        out(&p.h, &id, "cat /sys/fs/cgroup/memory.max").await,
        "67108864"
    );
    assert_eq!(out(&p.h, &id, "cat /proc/self/cgroup").await, "0::/");
    let mut rt = p.h.runtime().await;
    // Stats: the shim's cgroups v2 metrics.
    let stats = rt
        .container_stats(ContainerStatsRequest {
            container_id: id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .stats
        .unwrap();
    assert!(stats.memory.unwrap().working_set_bytes.unwrap().value > 0);
    // An update, through the shim's Update.
    rt.update_container_resources(UpdateContainerResourcesRequest {
        container_id: id.clone(),
        linux: Some(LinuxContainerResources {
            memory_limit_in_bytes: 96 << 20,
            memory_swap_limit_in_bytes: 96 << 20,
            ..Default::default()
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(
        out(&p.h, &id, "cat /sys/fs/cgroup/memory.max").await,
        (96u64 << 20).to_string()
    );
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
    rt.stop_container(StopContainerRequest {
        container_id: id.clone(),
        timeout: 10,
    })
    .await
    .unwrap();
    let st = wait_exited(&p.h, &id).await;
    assert_eq!(st.exit_code, 9, "{st:?}");
    pod
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "runs in the node VM (cgroup_v2_node)"]
async fn guest_shim_v2_handler_on_cgroup_v2() {
    guest();
    let mut p = setup_config(vec![], "/usr/lib/cni", vec![], &config()).await;
    let parent = kubelet_parent(&mut p);
    let image = app_image(&p).await;
    let pc = pod_under(&p, "shim-v2", &parent);
    a_pod(&p, &image, pc).await;
    common::pod::remove_listed(&p).await;
    assert_eq!(leftovers(&p), Vec::<String>::new());
    assert_eq!(child_cgroups(&v2_dir(&parent)), Vec::<String>::new());
    remove_parent(&parent);
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "runs in the systemd node VM (systemd_node)"]
async fn in_systemd_vm_shim_v2_handler_scopes() {
    guest();
    assert_eq!(read(Path::new("/proc/1/comm")), "systemd");
    let p = setup_config(
        vec![],
        "/usr/lib/cni",
        vec!["--cgroup-driver".into(), "systemd".into()],
        &config(),
    )
    .await;
    let image = app_image(&p).await;
    let slice = super::systemd::pod_slice(None);
    let pc = pod_under(&p, "sd-shim", &slice);
    let pod = a_pod(&p, &image, pc).await;
    // runc made the sandbox task's scope through systemd, in the pod's
    // slice (the stopped containers' scopes are gone with them).
    let unit = format!("husk-{pod}.scope");
    assert_eq!(super::systemd::prop(&unit, "Slice"), slice, "{unit}");
    common::pod::remove_listed(&p).await;
    assert_eq!(leftovers(&p), Vec::<String>::new());
    super::systemd::drop_slice(&slice);
}
