//! The systemd cgroup driver, in the VM where systemd is PID 1
//! (`systemd_node`): pods in a slice the test makes as the kubelet makes
//! its pod slices, each pause and container a `husk-<id>.scope` with
//! Delegate=yes; limits as unit properties that a `systemctl
//! daemon-reload` and a re-exec of systemd keep; updates; OOM kills of a scope that systemd
//! removes as its last process dies; the pod slice's limit; bad parents;
//! a failed create that leaves no unit; no units left after removal; and
//! systemd out of reach over D-Bus as a clear error at start.

use super::*;
use common::ctr::{app_image, ccfg, create_start, try_create, wait_exited};
use common::pod::{leftovers, run, setup_with};
use std::process::Command;

const HOG: &str = "dd if=/dev/zero of=/dev/null bs=256M count=1";

fn systemctl(args: &[&str]) -> String {
    let o = Command::new("systemctl").args(args).output().unwrap();
    assert!(
        o.status.success(),
        "systemctl {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// `systemctl show -p P --value unit`.
pub(super) fn prop(unit: &str, p: &str) -> String {
    systemctl(&["show", "-p", p, "--value", unit])
}

/// husk's scopes that systemd knows, in any state.
fn husk_units() -> Vec<String> {
    systemctl(&[
        "list-units",
        "--all",
        "--plain",
        "--no-legend",
        "husk-*.scope",
    ])
    .lines()
    .filter_map(|l| l.split_whitespace().next().map(str::to_string))
    .collect()
}

/// A pod slice as the kubelet makes one (a unit with the pod's limits),
/// `husktest-pod<n>.slice` under `husktest.slice`.
pub(super) fn pod_slice(memory_max: Option<u64>) -> String {
    let name = format!("husktest-pod{:08x}.slice", rand::random::<u32>());
    let mut unit = "[Slice]\n".to_string();
    if let Some(m) = memory_max {
        unit += &format!("MemoryMax={m}\nMemorySwapMax=0\n");
    }
    std::fs::write(Path::new("/run/systemd/system").join(&name), unit).unwrap();
    systemctl(&["daemon-reload"]);
    systemctl(&["start", &name]);
    name
}

pub(super) fn drop_slice(name: &str) {
    let _ = Command::new("systemctl").args(["stop", name]).status();
    let _ = std::fs::remove_file(Path::new("/run/systemd/system").join(name));
    systemctl(&["daemon-reload"]);
}

fn scope_dir(slice: &str, id: &str) -> PathBuf {
    Path::new("/sys/fs/cgroup")
        .join(husk::cgroup::paths::expand_slice(slice).trim_start_matches('/'))
        .join(format!("husk-{id}.scope"))
}

fn limited(image: &str) -> ContainerConfig {
    let mut c = ccfg(image, "limited", &["sleep", "3600"], &[]);
    c.linux.as_mut().unwrap().resources = Some(LinuxContainerResources {
        memory_limit_in_bytes: 64 << 20,
        memory_swap_limit_in_bytes: 64 << 20,
        cpu_period: 100_000,
        cpu_quota: 25_000,
        cpu_shares: 512,
        unified: [
            ("pids.max".to_string(), "64".to_string()),
            ("memory.high".to_string(), (48u64 << 20).to_string()),
        ]
        .into(),
        ..Default::default()
    });
    c
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "runs in the systemd node VM (systemd_node)"]
async fn in_systemd_vm_scopes_limits_reload_oom_and_cleanup() {
    guest();
    assert_eq!(read(Path::new("/proc/1/comm")), "systemd");
    let p = setup_with(
        vec![],
        "/usr/lib/cni",
        vec!["--cgroup-driver".into(), "systemd".into()],
    )
    .await;
    assert_eq!(driver_of(p.h.runtime().await).await, CgroupDriver::Systemd);
    let units_before = husk_units();
    let image = app_image(&p).await;
    let slice = pod_slice(None);

    // The pause and the container: scopes in the pod's slice.
    let pc = pod_under(&p, "sd", &slice);
    let pod = run(&p.h, pc.clone()).await.unwrap();
    let pause = format!("husk-{pod}.scope");
    assert_eq!(prop(&pause, "Slice"), slice);
    assert_eq!(prop(&pause, "ActiveState"), "active");
    let id = create_start(&p.h, &pod, &pc, limited(&image)).await;
    let unit = format!("husk-{id}.scope");
    assert_eq!(prop(&unit, "Slice"), slice);
    assert_eq!(prop(&unit, "Delegate"), "yes");
    let dir = scope_dir(&slice, &id);
    assert!(dir.is_dir(), "no scope at {}", dir.display());
    assert_eq!(out(&p.h, &id, "cat /proc/self/cgroup").await, "0::/");
    let inside = || async {
        out(
            &p.h,
            &id,
            "cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/cpu.max /sys/fs/cgroup/pids.max",
        )
        .await
    };
    let limits = |mem: u64, quota: u64| format!("{}\n{quota} 100000\n64", mem);
    assert_eq!(inside().await, limits(64 << 20, 25_000));
    assert_eq!(read(&dir.join("memory.swap.max")), "0");
    assert_eq!(read(&dir.join("memory.high")), (48u64 << 20).to_string());
    assert_eq!(prop(&unit, "MemoryMax"), (64u64 << 20).to_string());
    assert_eq!(prop(&unit, "TasksMax"), "64");
    assert_eq!(prop(&unit, "CPUQuotaPerSecUSec"), "250ms");

    // systemd writes its properties again at a reload: nothing is lost.
    systemctl(&["daemon-reload"]);
    assert_eq!(inside().await, limits(64 << 20, 25_000));
    assert_eq!(read(&dir.join("memory.swap.max")), "0");

    // An update goes through systemd too, and survives a reload.
    p.h.runtime()
        .await
        .update_container_resources(UpdateContainerResourcesRequest {
            container_id: id.clone(),
            linux: Some(LinuxContainerResources {
                memory_limit_in_bytes: 96 << 20,
                cpu_quota: 50_000,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(prop(&unit, "MemoryMax"), (96u64 << 20).to_string());
    systemctl(&["daemon-reload"]);
    assert_eq!(inside().await, limits(96 << 20, 50_000));
    // A restart of systemd itself (re-exec, as an upgrade of systemd
    // does) keeps the scope, its limits and its processes.
    systemctl(&["daemon-reexec"]);
    assert_eq!(prop(&unit, "ActiveState"), "active");
    assert_eq!(inside().await, limits(96 << 20, 50_000));
    assert_eq!(read(&dir.join("memory.swap.max")), "0");

    // OOM: systemd removes the scope as its last process dies; the shim
    // counted the kill while it was there.
    let mut c = ccfg(&image, "oom", &["sh", "-c", HOG], &[]);
    c.linux.as_mut().unwrap().resources = Some(LinuxContainerResources {
        memory_limit_in_bytes: 32 << 20,
        memory_swap_limit_in_bytes: 32 << 20,
        ..Default::default()
    });
    let oom = create_start(&p.h, &pod, &pc, c).await;
    let st = wait_exited(&p.h, &oom).await;
    assert_eq!((st.exit_code, st.reason.as_str()), (137, "OOMKilled"));

    // The pod slice's own limit bounds its containers.
    let bounded = pod_slice(Some(48 << 20));
    let mut pc2 = pod_under(&p, "sd-bounded", &bounded);
    pc2.metadata.as_mut().unwrap().uid = "sd-bounded".into();
    let pod2 = run(&p.h, pc2.clone()).await.unwrap();
    let hog = create_start(
        &p.h,
        &pod2,
        &pc2,
        ccfg(&image, "unbounded", &["sh", "-c", HOG], &[]),
    )
    .await;
    let st = wait_exited(&p.h, &hog).await;
    assert_eq!(
        (st.exit_code, st.reason.as_str()),
        (137, "OOMKilled"),
        "the pod slice's limit killed it"
    );

    // Bad input: a cgroupfs path is not a slice.
    let mut bad = pod_under(&p, "sd-bad", "/kubepods/burstable/pod1");
    bad.metadata.as_mut().unwrap().uid = "sd-bad".into();
    let e = run(&p.h, bad).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("slice"), "{e:?}");
    // A create that fails after its scope was made (a file mounted over a
    // directory fails in the container's init) leaves no unit behind.
    let units = husk_units();
    let mut broken = ccfg(&image, "broken", &["true"], &[]);
    broken.mounts.push(Mount {
        container_path: "/etc".into(),
        host_path: "/etc/hostname".into(),
        ..Default::default()
    });
    let e = try_create(&p.h, &pod, &pc, broken).await.unwrap_err();
    assert_ne!(e.code(), tonic::Code::Ok);
    crate::wait_for!(30, "the failed create's scope to go", {
        (husk_units() == units).then_some(())
    });

    common::pod::remove_listed(&p).await;
    assert_eq!(leftovers(&p), Vec::<String>::new());
    crate::wait_for!(30, "husk's scopes to go", {
        (husk_units() == units_before).then_some(())
    });
    for s in [&slice, &bounded] {
        let d = Path::new("/sys/fs/cgroup")
            .join(husk::cgroup::paths::expand_slice(s).trim_start_matches('/'));
        assert!(child_cgroups(&d).is_empty(), "{s}: {:?}", child_cgroups(&d));
        drop_slice(s);
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "runs in the systemd node VM (systemd_node)"]
async fn in_systemd_vm_no_dbus_is_a_clear_error() {
    guest();
    let dir = tempfile::tempdir().unwrap();
    // Neither the bus nor systemd's private socket (which libcontainer
    // falls back to as root, as go-systemd does) in reach: /run/systemd is
    // an empty tmpfs but for the `system` dir that says systemd is PID 1.
    let husk = env!("CARGO_BIN_EXE_husk");
    let o = Command::new("timeout")
        .args(["60", "unshare", "-m", "sh", "-c"])
        .arg(format!(
            "mount --make-rprivate / && mount -t tmpfs none /run/systemd && \
             mkdir /run/systemd/system && exec {husk} serve --cgroup-driver systemd \
             --root {d}/root --state {d}/run --listen {d}/husk.sock",
            d = dir.path().display()
        ))
        .env("DBUS_SYSTEM_BUS_ADDRESS", "unix:path=/run/husk-test-no-bus")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_ne!(o.status.code(), Some(124), "husk started: {err}");
    assert!(!o.status.success());
    assert!(err.contains("D-Bus") && err.contains("cgroupfs"), "{err}");
    assert!(!dir.path().join("husk.sock").exists());
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "runs in the systemd node VM (systemd_node)"]
async fn in_systemd_vm_kubelet_pod_slices() {
    common::managers::pod_slices_bound_the_pods_containers_together().await;
}
