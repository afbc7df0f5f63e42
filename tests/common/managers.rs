//! The node managers' scenarios that run on this host and in the node
//! VMs alike (`tests/kubelet_managers.rs`, `tests/node_vm/managers.rs`):
//! the pod cgroup bounding its containers together, and an OOM kill as a
//! node event; with the helpers the manager tests share.

use super::cluster::*;
use super::kubelet::tail;
use husk::api::cri::*;
use husk::cgroup::Layout;
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

pub const PODS: &str = "/api/v1/namespaces/default/pods";

pub fn pod(env: &Env, name: &str, spec: Value) -> Value {
    let mut spec = spec;
    spec["nodeName"] = json!(env.k.node);
    spec["terminationGracePeriodSeconds"] = json!(1);
    env.api
        .s
        .create(PODS, json!({"metadata": {"name": name}, "spec": spec}))
}

pub fn uid(v: &Value) -> String {
    v["metadata"]["uid"].as_str().unwrap().to_string()
}

pub fn sleeper(env: &Env, name: &str, resources: Value) -> Value {
    json!({"name": name, "image": env.image, "command": ["/bin/sleep", "3600"], "resources": resources})
}

/// A cgroup file of `path` (`v1` file name on v1, `v2` on v2).
pub fn cg(path: &str, controller: &str, v1: &str, v2: &str) -> Option<String> {
    let l = Layout::host();
    let file = if l.is_v2() { v2 } else { v1 };
    let dir = l.dir(controller, path)?;
    std::fs::read_to_string(dir.join(file))
        .ok()
        .map(|s| s.trim().to_string())
}

/// OOM kills in the memory cgroup at `path` and below (v1 counts them
/// where the victim was; v2's `memory.events` counts the subtree).
pub fn oom_kills_under(path: &str) -> u64 {
    let l = Layout::host();
    if l.is_v2() {
        return husk::cgroup::oom_kills(l, path).unwrap_or(0);
    }
    fn walk(dir: &std::path::Path) -> u64 {
        let own = std::fs::read_to_string(dir.join("memory.oom_control"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| {
                l.strip_prefix("oom_kill ")
                    .and_then(|v| v.trim().parse().ok())
            })
            .unwrap_or(0);
        own + std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().is_dir())
            .map(|e| walk(&e.path()))
            .sum::<u64>()
    }
    l.dir("memory", path).map(|d| walk(&d)).unwrap_or(0)
}

pub fn memory_limit(path: &str) -> Option<String> {
    cg(path, "memory", "memory.limit_in_bytes", "memory.max")
}

pub fn node_events(env: &Env, reason: &str) -> Vec<Value> {
    env.api
        .s
        .list("events")
        .into_iter()
        .filter(|e| e["involvedObject"]["kind"] == "Node" && e["reason"] == reason)
        .collect()
}

pub async fn wait_until(what: &str, env: &Env, secs: u64, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}\nkubelet log:\n{}",
            tail(&env.k.log(), 60)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The pod's running containers in husk serve.
pub async fn running_containers(env: &Env, pod_uid: &str) -> Vec<Container> {
    let mut rt = env.p.h.runtime().await;
    rt.list_containers(ListContainersRequest {
        filter: Some(ContainerFilter {
            label_selector: [("io.kubernetes.pod.uid".to_string(), pod_uid.to_string())].into(),
            state: Some(ContainerStateValue {
                state: ContainerState::ContainerRunning as i32,
            }),
            ..Default::default()
        }),
    })
    .await
    .unwrap()
    .into_inner()
    .containers
}

pub async fn container_id(env: &Env, pod_uid: &str, name: &str) -> String {
    running_containers(env, pod_uid)
        .await
        .into_iter()
        .find(|c| c.metadata.as_ref().is_some_and(|m| m.name == name))
        .unwrap()
        .id
}

/// The scenario on the cgroupfs driver.
pub async fn pod_cgroups_bound_the_pods_containers_together() {
    let pids = vec!["--pod-max-pids".to_string(), "64".to_string()];
    pod_cgroups_bound(env_with(TOKEN, pids).await, false).await
}

/// The scenario with husk serve and husk kubelet on the systemd driver:
/// the pod and QoS cgroups are slice units, whose limits are unit
/// properties that a `systemctl daemon-reload` keeps, and that are
/// stopped with their pods.
pub async fn pod_slices_bound_the_pods_containers_together() {
    let driver = || vec!["--cgroup-driver".to_string(), "systemd".to_string()];
    let mut kubelet = driver();
    kubelet.extend(["--pod-max-pids".to_string(), "64".to_string()]);
    pod_cgroups_bound(env_full(TOKEN, driver(), kubelet).await, true).await
}

/// `systemctl args…`, its output.
pub fn systemctl(args: &[&str]) -> String {
    let o = std::process::Command::new("systemctl")
        .args(args)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "systemctl {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

async fn pod_cgroups_bound(env: Env, systemd: bool) {
    let root = format!("/{}", env.k.cgroup_root);
    // Where a kubelet cgroup path is in the hierarchy: itself, or the
    // directory of its slice.
    let at = |p: &str| {
        if systemd {
            husk::cgroup::paths::expand_slice(&husk::cgroup::paths::slice_name(p))
        } else {
            p.to_string()
        }
    };
    let lim = json!({"limits": {"cpu": "250m", "memory": "32Mi"}});
    let g = pod(
        &env,
        "bounded",
        json!({"containers": [sleeper(&env, "a", lim.clone()), sleeper(&env, "b", lim)]}),
    );
    let b = pod(
        &env,
        "burst",
        json!({"containers": [sleeper(&env, "c", json!({"requests": {"cpu": "250m"}}))]}),
    );
    env.running_and_ready("bounded").await;
    env.running_and_ready("burst").await;
    let gpath = at(&format!("{root}/pod{}", uid(&g)));
    let bpath = at(&format!("{root}/burstable/pod{}", uid(&b)));
    let (burstable, besteffort) = (
        at(&format!("{root}/burstable")),
        at(&format!("{root}/besteffort")),
    );
    // Guaranteed: the sum of its containers' limits, under kubepods;
    // every pod: --pod-max-pids.
    assert_eq!(memory_limit(&gpath).as_deref(), Some("67108864"));
    for p in [&gpath, &bpath] {
        assert_eq!(cg(p, "pids", "pids.max", "pids.max").as_deref(), Some("64"));
    }
    if Layout::host().is_v2() {
        assert_eq!(
            cg(&gpath, "cpu", "", "cpu.max").as_deref(),
            Some("50000 100000")
        );
        // The kubelet 1.28's shares → weight: 512 → 20, 256 → 10, 2 → 1.
        let weight = |p: &str| cg(p, "cpu", "", "cpu.weight");
        assert_eq!(weight(&gpath).as_deref(), Some("20"));
        assert_eq!(weight(&burstable).as_deref(), Some("10"));
        assert_eq!(weight(&besteffort).as_deref(), Some("1"));
    } else {
        assert_eq!(
            cg(&gpath, "cpu", "cpu.cfs_quota_us", "").as_deref(),
            Some("50000")
        );
        assert_eq!(cg(&gpath, "cpu", "cpu.shares", "").as_deref(), Some("512"));
        assert_eq!(cg(&bpath, "cpu", "cpu.shares", "").as_deref(), Some("256"));
        // burstable: its pods' requests; besteffort: the minimum.
        assert_eq!(
            cg(&burstable, "cpu", "cpu.shares", "").as_deref(),
            Some("256")
        );
        assert_eq!(
            cg(&besteffort, "cpu", "cpu.shares", "").as_deref(),
            Some("2")
        );
    }
    if systemd {
        // systemd's own view of the slices, and a reload that keeps them.
        let unit = |p: &str| husk::cgroup::paths::slice_name(&format!("{root}{p}"));
        let gunit = unit(&format!("/pod{}", uid(&g)));
        let show = |u: &str, p: &str| systemctl(&["show", "-p", p, "--value", u]);
        assert_eq!(show(&gunit, "MemoryMax"), "67108864");
        assert_eq!(show(&gunit, "CPUQuotaPerSecUSec"), "500ms");
        assert_eq!(show(&gunit, "CPUWeight"), "20");
        assert_eq!(show(&gunit, "TasksMax"), "64");
        assert_eq!(show(&unit("/burstable"), "CPUWeight"), "10");
        // The pods' root slice: the node's CPUs as weight, no reservation
        // so no memory bound.
        use husk::kubelet::managers::cgroups::config::{shares, weight};
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as i64;
        let root_unit = unit("");
        assert_eq!(
            show(&root_unit, "CPUWeight"),
            weight(shares(cpus * 1000)).to_string()
        );
        assert_eq!(show(&root_unit, "MemoryMax"), "infinity");
        assert_eq!(show(&gunit, "ActiveState"), "active");
        // The runtime's scopes are in the pod's slice: its two containers'
        // (a pod that shares no PID namespace has no pause).
        let scopes =
            std::fs::read_dir(Path::new("/sys/fs/cgroup").join(gpath.trim_start_matches('/')))
                .unwrap()
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().ends_with(".scope"))
                .count();
        assert_eq!(scopes, 2, "two containers in {gpath}");
        systemctl(&["daemon-reload"]);
        assert_eq!(memory_limit(&gpath).as_deref(), Some("67108864"));
        assert_eq!(show(&gunit, "MemoryMax"), "67108864");
    }
    // Burstable without memory limits: no pod memory limit.
    let unlimited = memory_limit(&bpath).unwrap();
    assert!(
        unlimited == "max" || unlimited.parse::<u64>().unwrap() > 1 << 60,
        "{unlimited}"
    );
    // Container a's own limit raised past the pod's: a 100 MiB allocation
    // in it is stopped by the pod cgroup (64 MiB for a and b together).
    let a = container_id(&env, &uid(&g), "a").await;
    let mut rt = env.p.h.runtime().await;
    rt.update_container_resources(UpdateContainerResourcesRequest {
        container_id: a.clone(),
        linux: Some(LinuxContainerResources {
            memory_limit_in_bytes: 256 << 20,
            // Half a CPU, the pod's whole quota (cgroup v1 refuses a child
            // quota above its parent's): under a tenth of one, the hog's
            // page faults on an emulated CPU beside a busy host outran the
            // exec's minute.
            cpu_period: 100_000,
            cpu_quota: 50_000,
            cpu_shares: 102,
            ..Default::default()
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    let r = rt
        .exec_sync(ExecSyncRequest {
            container_id: a,
            cmd: vec![
                "sh".into(),
                "-c".into(),
                "dd if=/dev/zero of=/dev/null bs=100M count=1".into(),
            ],
            timeout: 120,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.exit_code, 137, "the hog was not killed: {r:?}");
    assert!(
        oom_kills_under(&gpath) >= 1,
        "no OOM kill counted under the pod cgroup"
    );
    // Removed pods take their cgroups with them.
    for name in ["bounded", "burst"] {
        env.api.s.delete(&env.pod_path(name), Some(0));
        env.wait_gone(&env.pod_path(name), 60).await;
    }
    for p in [&gpath, &bpath] {
        wait_until("pod cgroups removed", &env, 30, || {
            memory_limit(p).is_none()
        })
        .await;
    }
    if systemd {
        let prefix = husk::cgroup::paths::slice_name(&root);
        let prefix = prefix.trim_end_matches(".slice");
        let left = systemctl(&[
            "list-units",
            "--all",
            "--plain",
            "--no-legend",
            &format!("{prefix}-pod*"),
            &format!("{prefix}-*-pod*"),
        ]);
        assert_eq!(left, "", "pod slices left");
    }
}

pub async fn an_oom_kill_is_a_node_event() {
    let env = env().await;
    let hog = json!({"name": "hog", "image": env.image,
        "command": ["sh", "-c", "dd if=/dev/zero of=/dev/null bs=64M count=1; sleep 3600"],
        "resources": {"limits": {"memory": "16Mi"}}});
    let p = pod(
        &env,
        "hog",
        json!({"restartPolicy": "Never", "containers": [hog]}),
    );
    let want = format!("pod{}", uid(&p));
    // The sandbox, the pull and the start come first: tens of seconds in
    // an emulated node VM (tests/node_vm/managers.rs), more on a busy one.
    wait_until("an OOMKilling event", &env, 120, || {
        node_events(&env, "OOMKilling")
            .iter()
            .any(|e| e["message"].as_str().unwrap_or("").contains(&want))
    })
    .await;
    let ev = node_events(&env, "OOMKilling")
        .into_iter()
        .find(|e| e["message"].as_str().unwrap_or("").contains(&want))
        .unwrap();
    assert_eq!(ev["type"], "Warning");
    let msg = ev["message"].as_str().unwrap();
    assert!(msg.starts_with("Killed process "), "{msg}");
    assert!(msg.contains("(dd)"), "{msg}");
    // A memory cgroup's OOM is not a system OOM.
    assert!(node_events(&env, "SystemOOM")
        .iter()
        .all(|e| !e["message"].as_str().unwrap_or("").contains("dd")));
}
