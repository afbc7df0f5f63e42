//! NRI on cgroup v2 nodes: a plugin's resource adjustments (memory, CPU,
//! pids, the unified map) are the container's cgroup values under the
//! cgroupfs driver (the v2 node), and under the systemd driver its scope's
//! properties too (the systemd node).

use super::*;
use common::ctr::{app_image, ccfg, create_start};
use common::nri_plugin::{connected, TestPlugin};
use common::pod::{leftovers, remove_listed, run, setup, setup_with};
use husk::api::nri as api;

/// What the plugin asks: 80 MiB, 30 ms of CPU in 100, 48 tasks, and a
/// memory.high of 60 MiB through the unified map.
fn adjustment() -> api::ContainerAdjustment {
    api::ContainerAdjustment {
        linux: Some(api::LinuxContainerAdjustment {
            resources: Some(api::LinuxResources {
                memory: Some(api::LinuxMemory {
                    limit: Some(api::OptionalInt64 { value: 80 << 20 }),
                    ..Default::default()
                }),
                cpu: Some(api::LinuxCpu {
                    quota: Some(api::OptionalInt64 { value: 30_000 }),
                    period: Some(api::OptionalUInt64 { value: 100_000 }),
                    ..Default::default()
                }),
                pids: Some(api::LinuxPids { limit: 48 }),
                unified: [("memory.high".to_string(), (60u64 << 20).to_string())].into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The values the container reads in its own cgroup.
const INSIDE: &str =
    "cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/cpu.max /sys/fs/cgroup/pids.max /sys/fs/cgroup/memory.high";
const EXPECTED: &str = "83886080\n30000 100000\n48\n62914560";

async fn plugin(p: &Pod) -> TestPlugin {
    let plugin = TestPlugin::connect(&p.h.nri_socket(), "husk-vm", "10", adjustment()).await;
    crate::wait_for!(20, "the plugin to join", {
        (connected(p, "10-husk-vm") > 0).then_some(())
    });
    plugin
}

/// A pod of `pc` with a container the plugin adjusted, its limits read
/// from inside checked; the container's id.
async fn adjusted_app(p: &Pod, pc: PodSandboxConfig) -> String {
    let image = app_image(p).await;
    let pod = run(&p.h, pc.clone()).await.unwrap();
    let id = create_start(
        &p.h,
        &pod,
        &pc,
        ccfg(&image, "app", &["sleep", "3600"], &[]),
    )
    .await;
    assert_eq!(out(&p.h, &id, INSIDE).await, EXPECTED);
    id
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "runs in the cgroup v2 node VM (cgroup_v2_node)"]
async fn guest_nri_resources_in_the_container_cgroup() {
    guest();
    let p = setup(vec![]).await;
    let _plugin = plugin(&p).await;
    adjusted_app(&p, pod_config(&p, "nri")).await;
    remove_listed(&p).await;
    assert_eq!(leftovers(&p), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "runs in the systemd node VM (systemd_node)"]
async fn in_systemd_vm_nri_resources_in_the_scope() {
    guest();
    let p = setup_with(
        vec![],
        "/usr/lib/cni",
        vec!["--cgroup-driver".into(), "systemd".into()],
    )
    .await;
    let _plugin = plugin(&p).await;
    let slice = super::systemd::pod_slice(None);
    let id = adjusted_app(&p, pod_under(&p, "nri-sd", &slice)).await;
    let unit = format!("husk-{id}.scope");
    assert_eq!(
        super::systemd::prop(&unit, "MemoryMax"),
        (80u64 << 20).to_string()
    );
    assert_eq!(super::systemd::prop(&unit, "TasksMax"), "48");
    assert_eq!(super::systemd::prop(&unit, "CPUQuotaPerSecUSec"), "300ms");
    remove_listed(&p).await;
    super::systemd::drop_slice(&slice);
    assert_eq!(leftovers(&p), Vec::<String>::new());
}
