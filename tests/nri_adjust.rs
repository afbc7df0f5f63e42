//! NRI adjustments through a real husk serve, each seen in the running
//! container, made by containerd/nri v0.12's own plugins (`../shared/nri/`)
//! where one makes it:
//!
//! - `nri-device-injector` injects a device node, a mount and a CDI
//!   device from pod annotations (its README's syntax), seen inside the
//!   container; `nri-ulimit-adjuster` sets RLIMIT_NOFILE and
//!   RLIMIT_MEMLOCK, seen in `/proc/self/limits`; the injector's network
//!   device (a veth of the node), memory policy and sysctl are the
//!   container's.
//! - A plugin of the test's own (`common::nri_plugin`) sets the
//!   scheduling policy, a seccomp policy and the IPC namespace: each is
//!   the running container's, under husk's own path and under runc 1.4.3
//!   (`../shared/shims/`).
//! - Updates and evictions of other containers a plugin answers at
//!   CreateContainer: the update is in the other container's cgroup, the
//!   evicted one exits; an update of the container being made, or of one
//!   not there, refuses the create; a plugin's Synchronize answer updates
//!   a container already there, and one whose update fails does not join.
//! - A block I/O class a plugin names is the node's class
//!   (`[cgroup] blockio_config_file`), its throttles in the container's
//!   blkio cgroup; a class the table lacks refuses the container.
//! - Two plugins setting one field: the container is refused naming both
//!   plugins and the field, and nothing of it is left.
#![allow(clippy::unwrap_used)]

mod common;

use common::ctr::{ccfg, create_start, pod_config, sh};
use common::nri_plugin::{connected, image, Plugin};
use common::pod::*;
use husk::api::cri::*;
use std::process::{Command, Stdio};
use tonic::Code;

#[tokio::test(flavor = "multi_thread")]
async fn devices_mounts_cdi_and_rlimits_come_from_the_plugins() {
    if !common::require_root() {
        return;
    }
    let cdi = tempfile::tempdir().unwrap();
    std::fs::write(
        cdi.path().join("vendor.yaml"),
        "cdiVersion: 0.6.0\nkind: nri.husk.dev/dev\ndevices:\n- name: d0\n  containerEdits:\n    env: [CDI_BY_NRI=1]\n",
    )
    .unwrap();
    let p = setup_with(
        vec![],
        "/usr/lib/cni",
        vec!["--cdi-spec-dirs".into(), cdi.path().display().to_string()],
    )
    .await;
    let image = image(&p).await;
    let _devices = Plugin::start(&p, "nri-device-injector", "10-nri-device-injector", &[]).await;
    let _ulimits = Plugin::start(&p, "nri-ulimit-adjuster", "20-nri-ulimit-adjuster", &[]).await;
    let mut pc = pod_config(&p, "inject");
    pc.annotations.insert(
        "devices.noderesource.dev/container.app".into(),
        "- path: /dev/nri-null\n  type: c\n  major: 1\n  minor: 3\n  file_mode: 0666\n".into(),
    );
    pc.annotations.insert(
        "mounts.noderesource.dev/container.app".into(),
        "- source: tmpfs\n  destination: /nri-tmp\n  type: tmpfs\n  options: [nosuid, size=1m]\n"
            .into(),
    );
    pc.annotations.insert(
        "cdi-devices.noderesource.dev/container.app".into(),
        "- nri.husk.dev/dev=d0\n".into(),
    );
    pc.annotations.insert(
        "ulimits.noderesource.dev/container.app".into(),
        "- type: RLIMIT_NOFILE\n  soft: 1111\n  hard: 2222\n- type: memlock\n  soft: 65536\n  hard: 131072\n"
            .into(),
    );
    let pod = run(&p.h, pc.clone()).await.unwrap();
    let c = create_start(&p.h, &pod, &pc, ccfg(&image, "app", &["sleep", "100"], &[])).await;
    let dev = sh(
        &p,
        &c,
        "stat -c '%t %T %F' /dev/nri-null; echo x > /dev/nri-null",
    )
    .await;
    assert_eq!(dev.trim(), "1 3 character special file");
    let mounts = sh(&p, &c, "cat /proc/self/mounts").await;
    assert!(
        mounts.lines().any(|l| l.contains(" /nri-tmp tmpfs ")),
        "{mounts}"
    );
    assert!(sh(&p, &c, "env").await.lines().any(|l| l == "CDI_BY_NRI=1"));
    let limits = sh(&p, &c, "cat /proc/self/limits").await;
    let row = |name: &str| -> Vec<String> {
        limits
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name} in {limits}"))[name.len()..]
            .split_whitespace()
            .map(String::from)
            .collect()
    };
    assert_eq!(row("Max open files")[..2], ["1111", "2222"]);
    assert_eq!(row("Max locked memory")[..2], ["65536", "131072"]);
    remove_listed(&p).await;
    assert_eq!(leftovers(&p), Vec::<String>::new());
}

/// A veth pair on the node (test-unique names, no addresses), deleted on
/// drop if it is still there; its first end is the one given away.
struct Veth(String);

impl Veth {
    fn new() -> Veth {
        let name = format!("hkn{}", std::process::id() % 1_000_000);
        let peer = format!("{name}p");
        let ok = Command::new("ip")
            .args(["link", "add", &name, "type", "veth", "peer", "name", &peer])
            .status()
            .unwrap()
            .success();
        assert!(ok, "ip link add {name}");
        Veth(name)
    }

    fn on_node(&self) -> bool {
        Command::new("ip")
            .args(["link", "show", &self.0])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap()
            .success()
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        if self.on_node() {
            let _ = Command::new("ip").args(["link", "del", &self.0]).status();
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn net_devices_memory_policy_and_sysctls_come_from_the_device_injector() {
    if !common::require_root() {
        return;
    }
    let p = setup(vec![]).await;
    let image = image(&p).await;
    let _devices = Plugin::start(&p, "nri-device-injector", "10-nri-device-injector", &[]).await;
    let link = Veth::new();
    let mut pc = pod_config(&p, "netdev");
    pc.annotations.insert(
        "network-devices.noderesource.dev/container.app".into(),
        format!("- hostIf: {}\n  Name: netdev0\n", link.0),
    );
    pc.annotations.insert(
        "memory-policy.noderesource.dev/container.app".into(),
        "mode: MPOL_BIND\nnodes: \"0\"\n".into(),
    );
    pc.annotations.insert(
        "sysctl.noderesource.dev/container.app".into(),
        "net.ipv4.ip_unprivileged_port_start: \"100\"\n".into(),
    );
    let pod = run(&p.h, pc.clone()).await.unwrap();
    let c = create_start(&p.h, &pod, &pc, ccfg(&image, "app", &["sleep", "100"], &[])).await;
    // The node's link is the container's netdev0, and gone from the node.
    let links = sh(&p, &c, "ls /sys/class/net").await;
    assert!(links.split_whitespace().any(|l| l == "netdev0"), "{links}");
    assert!(!link.on_node(), "{} is still on the node", link.0);
    // The payload runs under the memory policy: bound to node 0.
    let maps = sh(&p, &c, "cat /proc/1/numa_maps").await;
    assert!(
        maps.lines()
            .any(|l| l.split_whitespace().nth(1) == Some("bind:0")),
        "{maps}"
    );
    assert_eq!(
        sh(&p, &c, "cat /proc/sys/net/ipv4/ip_unprivileged_port_start")
            .await
            .trim(),
        "100"
    );
    // The pod's network namespace gone, the link is gone with it, and
    // its peer on the node too.
    remove_listed(&p).await;
    assert!(!link.on_node(), "{} came back to the node", link.0);
    assert!(
        !Veth(format!("{}p", link.0)).on_node(),
        "the peer is still on the node"
    );
    assert_eq!(leftovers(&p), Vec::<String>::new());
}

/// A mount (a pinned namespace) the test made, unmounted on drop.
struct Unmount(std::path::PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn scheduling_seccomp_and_namespaces_from_a_plugin_are_the_container_s() {
    if !common::require_root() {
        return;
    }
    // Where the pods' mounts live is named: the node's namespace here.
    from_a_plugin(vec!["--mount-namespace".into(), "node".into()]).await;
}

/// The same with each pod's mounts in its monitor's own namespace: the
/// namespace the test pins after the pod started is not there, and is
/// joined through the monitor's hold on the node's root.
#[tokio::test(flavor = "multi_thread")]
async fn a_namespace_from_a_plugin_is_joined_from_the_pods_own_mount_namespace() {
    if !common::require_root() {
        return;
    }
    from_a_plugin(vec!["--mount-namespace".into(), "pod".into()]).await;
}

async fn from_a_plugin(args: Vec<String>) {
    use husk::api::nri as api;
    use std::os::unix::fs::MetadataExt;
    let cfg = format!(
        "[runtimes.runc14]\ntype = \"oci\"\npath = \"{}\"\n",
        common::shared("shims/runc-1.4.3").display()
    );
    let p = setup_config(vec![], "/usr/lib/cni", args, &cfg).await;
    let image = image(&p).await;
    let pin = p.h.dir.path().join("test-ipc");
    std::fs::write(&pin, "").unwrap();
    let pinned = Command::new("unshare")
        .arg(format!("--ipc={}", pin.display()))
        .arg("true")
        .status()
        .unwrap();
    assert!(pinned.success());
    let unpin = Unmount(pin.clone());
    let adjust = api::ContainerAdjustment {
        linux: Some(api::LinuxContainerAdjustment {
            scheduler: Some(api::LinuxScheduler {
                policy: api::LinuxSchedulerPolicy::SchedBatch as i32,
                nice: 7,
                flags: vec![api::LinuxSchedulerFlag::SchedFlagResetOnFork as i32],
                ..Default::default()
            }),
            seccomp_policy: Some(api::LinuxSeccomp {
                default_action: "SCMP_ACT_ALLOW".into(),
                syscalls: vec![api::LinuxSyscall {
                    names: vec!["mkdir".into(), "mkdirat".into()],
                    action: "SCMP_ACT_ERRNO".into(),
                    errno_ret: Some(api::OptionalUInt32 { value: 1 }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            // An IPC namespace the test pinned instead of the pod's.
            namespaces: vec![api::LinuxNamespace {
                r#type: "ipc".into(),
                path: pin.display().to_string(),
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    let before = connected(&p, "30-husk-test");
    let _plugin =
        common::nri_plugin::TestPlugin::connect(&p.h.nri_socket(), "husk-test", "30", adjust).await;
    wait_for!(20, "the test plugin to join", {
        (connected(&p, "30-husk-test") > before).then_some(())
    });
    // Under husk's own path and under runc 1.4.3: the spec carries the
    // OCI names of the scheduler flags for runc, libcontainer's for husk.
    for handler in ["", "runc14"] {
        let pc = pod_config(&p, &format!("sched{handler}"));
        let pod = run_under(&p.h, pc.clone(), handler).await.unwrap();
        let c = create_start(&p.h, &pod, &pc, ccfg(&image, "app", &["sleep", "100"], &[])).await;
        // /proc/1/stat: the 19th field is the nice value, the 41st the
        // policy (SCHED_BATCH is 3).
        let stat = sh(&p, &c, "cat /proc/1/stat").await;
        let after_comm: Vec<&str> = stat
            .rsplit_once(") ")
            .unwrap()
            .1
            .split_whitespace()
            .collect();
        assert_eq!(
            (after_comm[16], after_comm[38]),
            ("7", "3"),
            "{handler:?}: {stat}"
        );
        let mk = sh(&p, &c, "mkdir /tmp/refused 2>&1; echo rc=$?").await;
        assert!(
            mk.contains("Operation not permitted") && mk.contains("rc=1"),
            "{handler:?}: {mk}"
        );
        let ipc = sh(&p, &c, "readlink /proc/1/ns/ipc").await;
        let ino = std::fs::metadata(&pin).unwrap().ino();
        assert_eq!(ipc.trim(), format!("ipc:[{ino}]"), "{handler:?}");
    }
    remove_listed(&p).await;
    drop(unpin);
    assert_eq!(leftovers(&p), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn updates_and_evictions_answered_at_create_reach_the_other_containers() {
    if !common::require_root() {
        return;
    }
    use husk::api::nri as api;
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};
    let p = setup(vec![]).await;
    let image = image(&p).await;
    let ids: Arc<Mutex<HashMap<String, String>>> = Arc::default();
    let known = ids.clone();
    let limit = |id: &str| api::ContainerUpdate {
        container_id: id.into(),
        linux: Some(api::LinuxContainerUpdate {
            resources: Some(api::LinuxResources {
                memory: Some(api::LinuxMemory {
                    limit: Some(api::OptionalInt64 { value: 96 << 20 }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        }),
        ignore_failure: false,
    };
    let respond: common::nri_plugin::Respond = Arc::new(move |req| {
        let c = req.container.as_ref().unwrap();
        let ids = known.lock().unwrap();
        let mut r = api::CreateContainerResponse::default();
        match c.name.as_str() {
            "third" => {
                r.update = vec![limit(&ids["first"])];
                r.evict = vec![api::ContainerEviction {
                    container_id: ids["second"].clone(),
                    reason: "make room".into(),
                }];
            }
            "selfish" => r.update = vec![limit(&c.id)],
            "ghost" => r.update = vec![limit("no-such-container")],
            _ => {}
        }
        r
    });
    let before = connected(&p, "40-husk-updates");
    let _plugin =
        common::nri_plugin::TestPlugin::answering(&p.h.nri_socket(), "husk-updates", "40", respond)
            .await;
    wait_for!(20, "the test plugin to join", {
        (connected(&p, "40-husk-updates") > before).then_some(())
    });
    let pc = pod_config(&p, "updates");
    let pod = run(&p.h, pc.clone()).await.unwrap();
    for name in ["first", "second"] {
        let id = create_start(&p.h, &pod, &pc, ccfg(&image, name, &["sleep", "100"], &[])).await;
        ids.lock().unwrap().insert(name.into(), id);
    }
    let (first, second) = {
        let ids = ids.lock().unwrap();
        (ids["first"].clone(), ids["second"].clone())
    };
    // The third's create updates the first and evicts the second.
    create_start(
        &p.h,
        &pod,
        &pc,
        ccfg(&image, "third", &["sleep", "100"], &[]),
    )
    .await;
    let mem = sh(
        &p,
        &first,
        "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max",
    )
    .await;
    assert_eq!(mem.trim(), (96u64 << 20).to_string());
    let st = common::ctr::container_status(&p.h, &first).await;
    assert_eq!(
        st.resources
            .and_then(|r| r.linux)
            .map(|l| l.memory_limit_in_bytes),
        Some(96 << 20)
    );
    let st = common::ctr::container_status(&p.h, &second).await;
    assert_eq!(st.state, ContainerState::ContainerExited as i32);
    // A plugin's Synchronize answer updates a container already there; one
    // whose update fails does not join.
    let shares = |id: &str| api::ContainerUpdate {
        container_id: id.into(),
        linux: Some(api::LinuxContainerUpdate {
            resources: Some(api::LinuxResources {
                cpu: Some(api::LinuxCpu {
                    shares: Some(api::OptionalUInt64 { value: 512 }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        }),
        ignore_failure: false,
    };
    let none: common::nri_plugin::Respond = Arc::new(|_| Default::default());
    let _sync = common::nri_plugin::TestPlugin::syncing(
        &p.h.nri_socket(),
        "husk-sync",
        "50",
        none.clone(),
        vec![shares(&first)],
    )
    .await;
    wait_for!(20, "the syncing plugin to join", {
        (connected(&p, "50-husk-sync") > 0).then_some(())
    });
    let st = common::ctr::container_status(&p.h, &first).await;
    assert_eq!(
        st.resources.and_then(|r| r.linux).map(|l| l.cpu_shares),
        Some(512)
    );
    let _bad = common::nri_plugin::TestPlugin::syncing(
        &p.h.nri_socket(),
        "husk-badsync",
        "60",
        none,
        vec![shares("no-such-container")],
    )
    .await;
    wait_for!(20, "the failed synchronization logged", {
        p.h.log()
            .contains("failed to update containers no-such-container")
            .then_some(())
    });
    assert_eq!(connected(&p, "60-husk-badsync"), 0);
    // An update of the container being made, or of one that is not
    // there: refused, naming the plugin, and nothing of it left.
    let containers_dir = p.h.root().join("containers");
    let files = common::count_files(&containers_dir);
    for (name, says) in [
        ("selfish", "during creation"),
        ("ghost", "no-such-container"),
    ] {
        let e = common::ctr::try_create(&p.h, &pod, &pc, ccfg(&image, name, &["sleep", "1"], &[]))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::FailedPrecondition, "{name}: {e:?}");
        assert!(e.message().contains(says), "{name}: {e:?}");
    }
    assert_eq!(common::count_files(&containers_dir), files);
    remove_listed(&p).await;
    assert_eq!(leftovers(&p), Vec::<String>::new());
}

/// A whole block device of the node (its /dev path and major:minor).
fn a_block_device() -> (String, String) {
    let mut names: Vec<String> = std::fs::read_dir("/sys/block")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| std::path::Path::new("/dev").join(n).exists())
        .collect();
    names.sort();
    let name = names.first().expect("a block device").clone();
    let dev = std::fs::read_to_string(format!("/sys/block/{name}/dev")).unwrap();
    (format!("/dev/{name}"), dev.trim().to_string())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_block_io_class_from_a_plugin_is_the_node_s_class_in_the_cgroup() {
    if !common::require_root() {
        return;
    }
    use husk::api::nri as api;
    use std::sync::Arc;
    let (dev, majmin) = a_block_device();
    let classes = tempfile::tempdir().unwrap();
    let file = classes.path().join("blockio.yaml");
    std::fs::write(
        &file,
        format!(
            "Classes:\n  slowread:\n  - Devices: [{dev}]\n    ThrottleReadBps: 1Mi\n    ThrottleWriteIOPS: \"100\"\n"
        ),
    )
    .unwrap();
    let cfg = format!("[cgroup]\nblockio_config_file = \"{}\"\n", file.display());
    let p = setup_config(vec![], "/usr/lib/cni", vec![], &cfg).await;
    let image = image(&p).await;
    let respond: common::nri_plugin::Respond = Arc::new(|req| {
        let class = match req.container.as_ref().unwrap().name.as_str() {
            "slow" => "slowread",
            _ => "gold",
        };
        api::CreateContainerResponse {
            adjust: Some(api::ContainerAdjustment {
                linux: Some(api::LinuxContainerAdjustment {
                    resources: Some(api::LinuxResources {
                        blockio_class: Some(api::OptionalString {
                            value: class.into(),
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    });
    let _plugin =
        common::nri_plugin::TestPlugin::answering(&p.h.nri_socket(), "husk-blockio", "20", respond)
            .await;
    wait_for!(20, "the plugin to join", {
        (connected(&p, "20-husk-blockio") > 0).then_some(())
    });
    let pc = pod_config(&p, "blockio");
    let pod = run(&p.h, pc.clone()).await.unwrap();
    let c = create_start(
        &p.h,
        &pod,
        &pc,
        ccfg(&image, "slow", &["sleep", "100"], &[]),
    )
    .await;
    let throttles = sh(
        &p,
        &c,
        "cat /sys/fs/cgroup/blkio/blkio.throttle.read_bps_device /sys/fs/cgroup/blkio/blkio.throttle.write_iops_device",
    )
    .await;
    assert!(
        throttles.lines().any(|l| l == format!("{majmin} 1048576")),
        "{throttles}"
    );
    assert!(
        throttles.lines().any(|l| l == format!("{majmin} 100")),
        "{throttles}"
    );
    // A class the node's table lacks: refused in containerd's words.
    let e = common::ctr::try_create(&p.h, &pod, &pc, ccfg(&image, "gold", &["sleep", "1"], &[]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(
        e.message()
            .contains("failed to adjust BlockIO class in OCI Spec: no OCI BlockIO parameters for class \"gold\""),
        "{e:?}"
    );
    remove_listed(&p).await;
    assert_eq!(leftovers(&p), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn two_plugins_on_one_field_refuse_the_container_naming_both() {
    if !common::require_root() {
        return;
    }
    let p = setup(vec![]).await;
    let image = image(&p).await;
    let _a = Plugin::start(&p, "nri-logger", "10-nri-logger", &["-set-env", "SAME"]).await;
    let _b = Plugin::start(&p, "nri-logger", "20-nri-logger", &["-set-env", "SAME"]).await;
    let pc = pod_config(&p, "conflict");
    let pod = run(&p.h, pc.clone()).await.unwrap();
    let e =
        p.h.runtime()
            .await
            .create_container(CreateContainerRequest {
                pod_sandbox_id: pod.clone(),
                config: Some(ccfg(&image, "app", &["sleep", "100"], &[])),
                sandbox_config: Some(pc.clone()),
            })
            .await
            .expect_err("a conflict");
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(
        e.message()
            .contains("plugins \"20-nri-logger\" and \"10-nri-logger\" both tried to set Env SAME"),
        "{e:?}"
    );
    assert!(
        list_containers(&p).await.is_empty(),
        "nothing of it is listed"
    );
    remove_listed(&p).await;
    assert_eq!(leftovers(&p), Vec::<String>::new());
}
