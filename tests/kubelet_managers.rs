//! The node managers of `husk kubelet`, joined to the stand-in API server
//! over a real `husk serve`: the pod and QoS cgroups and node allocatable
//! (the pod cgroup bounds its containers together), the refusals of bad
//! settings before anything is made, image GC and eviction on an image
//! file system (a tmpfs the test fills), the OOM watcher's events, and
//! RuntimeClass. The certificate manager is `kubelet_certificates.rs`.
#![allow(clippy::unwrap_used)]

mod common;

use common::cluster::*;
use common::kubelet::tail;
use common::managers::*;
use common::{require_root, Tmpfs};
use husk::api::cri::*;
use husk::cgroup::Layout;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread")]
async fn pod_cgroups_bound_the_pods_containers_together() {
    if require_root() {
        common::managers::pod_cgroups_bound_the_pods_containers_together().await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_oom_kill_is_a_node_event() {
    if require_root() {
        common::managers::an_oom_kill_is_a_node_event().await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn node_allocatable_bounds_kubepods() {
    if !require_root() {
        return;
    }
    let env = env_with(
        TOKEN,
        vec![
            "--kube-reserved".into(),
            "cpu=500m,memory=512Mi".into(),
            "--system-reserved".into(),
            "memory=512Mi".into(),
        ],
    )
    .await;
    let node = env
        .wait(&env.node_path(), "node status", 60, |v| {
            v["status"]["allocatable"]["memory"].is_string()
        })
        .await;
    let ki = |q: &Value| -> i64 {
        q.as_str()
            .unwrap()
            .trim_end_matches("Ki")
            .parse::<i64>()
            .unwrap()
            * 1024
    };
    let cap = ki(&node["status"]["capacity"]["memory"]);
    let alloc = ki(&node["status"]["allocatable"]["memory"]);
    assert_eq!(alloc, cap - (1 << 30) - (100 << 20));
    let cpus: i64 = node["status"]["capacity"]["cpu"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        node["status"]["allocatable"]["cpu"],
        json!(format!("{}m", cpus * 1000 - 500))
    );
    let limit: i64 = memory_limit(&format!("/{}", env.k.cgroup_root))
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        (limit - (cap - (1 << 30))).abs() < 4096,
        "kubepods {limit}, capacity {cap}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_settings_refuse_the_start_and_make_nothing() {
    if !require_root() {
        return;
    }
    let p = common::pod::setup(vec![]).await;
    // The systemd driver is refused where it cannot work: on a v1 host,
    // or where systemd is not reachable over D-Bus.
    let no_systemd = if Layout::host().is_v2() {
        "systemd is not reachable over D-Bus"
    } else {
        "--cgroup-driver systemd needs a cgroup v2 host"
    };
    let cases: [(&[&str], &str); 8] = [
        (&["--cgroup-driver", "systemd"], no_systemd),
        (
            &["--eviction-hard", "memory.free<1Gi"],
            "unknown eviction signal",
        ),
        (
            &["--eviction-hard", "memory.available<lots"],
            "memory.available<lots",
        ),
        (
            &["--eviction-soft", "memory.available<1Gi"],
            "no grace period",
        ),
        (
            &[
                "--image-gc-high-threshold",
                "50",
                "--image-gc-low-threshold",
                "60",
            ],
            "is above --image-gc-high-threshold",
        ),
        (
            &["--kube-reserved", "memory=100Ti"],
            "larger than the node's capacity",
        ),
        (&["--kube-reserved", "gpu=1"], "cannot be reserved"),
        (
            &["--enforce-node-allocatable", "pods,kube-reserved"],
            "needs --kube-reserved-cgroup",
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (flags, want) in cases {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_husk"))
            .args(["kubelet", "--runtime-endpoint", &p.h.endpoint()])
            .arg("--manifests")
            .arg(dir.path())
            .arg("--root")
            .arg(dir.path().join("root"))
            .args(["--cgroup-root", &format!("/{}", p.cgroup_parent)])
            .args(flags)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flags:?} started");
        assert!(err.contains(want), "{flags:?}: {err}");
        for h in ["memory", "cpu", ""] {
            if let Some(d) = Layout::host().dir(h, &p.cgroup_parent) {
                assert!(!d.exists(), "{flags:?} left {}", d.display());
            }
        }
    }
}

async fn image_ref(env: &Env, image: &str) -> Option<String> {
    env.p
        .h
        .images()
        .await
        .image_status(ImageStatusRequest {
            image: Some(ImageSpec {
                image: image.into(),
                ..Default::default()
            }),
            verbose: false,
        })
        .await
        .unwrap()
        .into_inner()
        .image
        .map(|i| i.id)
}

/// An image nobody uses, of `mb` MiB, pulled into husk serve.
async fn unused_image(env: &Env, mb: usize) -> String {
    use common::images::*;
    let img = Image::new(vec![
        Layer::new(&busybox_entries(), Compression::Gzip),
        Layer::new(
            &[Entry::File("blob".into(), random_bytes(mb << 20, 7), 0o644)],
            Compression::None,
        ),
    ]);
    Pusher::new(&env.p.reg)
        .image("test/extra", "1", &img, Format::Oci)
        .await;
    let name = format!("{}/test/extra:1", env.p.reg.host());
    env.p.h.pull(&name).await.unwrap();
    name
}

/// husk serve with its root on a 160 MiB tmpfs the test can fill, and a
/// kubelet with `args`; the environment goes before the tmpfs.
async fn on_tmpfs(args: &[&str]) -> (Tmpfs, Env) {
    let fs = Tmpfs::new("160m");
    let root = fs.path().join("root").display().to_string();
    let env = env_full(
        TOKEN,
        vec!["--root".into(), root],
        args.iter().map(|a| a.to_string()).collect(),
    )
    .await;
    (fs, env)
}

#[tokio::test(flavor = "multi_thread")]
async fn image_gc_frees_unused_images_and_says_when_it_cannot() {
    if !require_root() {
        return;
    }
    let (fs, env) = on_tmpfs(&[
        "--eviction-hard",
        "",
        "--image-gc-high-threshold",
        "60",
        "--image-gc-low-threshold",
        "10",
        "--image-gc-period",
        "1s",
        "--minimum-image-ttl-duration",
        "0s",
    ])
    .await;
    pod(
        &env,
        "user",
        json!({"containers": [sleeper(&env, "app", json!({}))]}),
    );
    env.running_and_ready("user").await;
    let extra = unused_image(&env, 8).await;
    assert!(image_ref(&env, &extra).await.is_some());
    // The sandbox image, pulled ahead as an operator would (a pod that
    // shares no PID namespace has no pause, so nothing here pulled it):
    // unused, but pinned.
    let pause = format!("{}/k8s/pause:test", env.p.reg.host());
    env.p.h.pull(&pause).await.unwrap();
    // Up to 70% used: over the high threshold, and more than the unused
    // image can give back to reach the low one.
    let (cap, avail) = fs.space();
    fs.fill("fill", avail - cap * 3 / 10);
    let deadline = Instant::now() + Duration::from_secs(60);
    while image_ref(&env, &extra).await.is_some() {
        assert!(
            Instant::now() < deadline,
            "unused image kept\n{}",
            tail(&env.k.log(), 60)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    wait_until("FreeDiskSpaceFailed", &env, 30, || {
        !node_events(&env, "FreeDiskSpaceFailed").is_empty()
    })
    .await;
    let ev = &node_events(&env, "FreeDiskSpaceFailed")[0];
    assert_eq!(ev["type"], "Warning");
    assert_eq!(ev["involvedObject"]["name"], json!(env.k.node));
    assert!(ev["message"]
        .as_str()
        .unwrap()
        .contains("Failed to garbage collect required amount of images"));
    // The image in use and the pinned sandbox image stay.
    assert!(
        image_ref(&env, &env.image).await.is_some(),
        "image in use collected"
    );
    assert!(
        image_ref(&env, &pause).await.is_some(),
        "sandbox image collected"
    );
    assert_eq!(phase_of(&env, "user"), "Running");
}

fn phase_of(env: &Env, name: &str) -> String {
    env.api
        .s
        .get(&env.pod_path(name))
        .map(|v| v["status"]["phase"].as_str().unwrap_or("").to_string())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn disk_pressure_frees_images_then_evicts_the_lowest_qos_pod() {
    if !require_root() {
        return;
    }
    let (fs, env) = on_tmpfs(&[
        "--eviction-hard",
        "imagefs.available<40%",
        "--eviction-monitoring-period",
        "1s",
        "--eviction-pressure-transition-period",
        "3s",
        "--image-gc-high-threshold",
        "100",
        "--minimum-image-ttl-duration",
        "0s",
    ])
    .await;
    let lim = json!({"limits": {"cpu": "100m", "memory": "32Mi"}});
    let g = pod(
        &env,
        "guaranteed",
        json!({"containers": [sleeper(&env, "app", lim)]}),
    );
    let be = pod(
        &env,
        "besteffort",
        json!({"containers": [sleeper(&env, "app", json!({}))]}),
    );
    env.running_and_ready("guaranteed").await;
    env.running_and_ready("besteffort").await;
    let extra = unused_image(&env, 8).await;
    let node = env.node_path();
    assert_eq!(
        cond_status(&env.api.s.get(&node).unwrap(), "DiskPressure"),
        "False"
    );
    // 20% left: under the threshold, and freeing the image is not enough.
    let (cap, avail) = fs.space();
    fs.fill("fill", avail - cap / 5);
    let mut first = None;
    wait_until("a pod evicted", &env, 60, || {
        first = ["besteffort", "guaranteed"]
            .into_iter()
            .find(|n| phase_of(&env, n) == "Failed");
        first.is_some()
    })
    .await;
    assert_eq!(first, Some("besteffort"), "the lowest QoS class goes first");
    let v = env.api.s.get(&env.pod_path("besteffort")).unwrap();
    assert_eq!(v["status"]["reason"], "Evicted");
    let msg = v["status"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("The node was low on resource: ephemeral-storage."),
        "{msg}"
    );
    assert!(env
        .event_reasons(&uid(&be))
        .contains(&"Evicted".to_string()));
    let _ = g;
    assert!(
        image_ref(&env, &extra).await.is_none(),
        "images are reclaimed before pods"
    );
    env.wait(&node, "DiskPressure", 30, |v| {
        cond_status(v, "DiskPressure") == "True"
    })
    .await;
    assert!(!node_events(&env, "EvictionThresholdMet").is_empty());
    // Under pressure a new pod is refused, as the kubelet's admission does.
    pod(
        &env,
        "late",
        json!({"containers": [sleeper(&env, "app", json!({}))]}),
    );
    let late = env
        .wait(&env.pod_path("late"), "the late pod refused", 30, |v| {
            v["status"]["phase"] == "Failed"
        })
        .await;
    assert_eq!(late["status"]["reason"], "Evicted");
    assert_eq!(
        late["status"]["message"],
        "The node had condition: [DiskPressure]."
    );
    // Pressure gone: the condition clears after the transition period.
    std::fs::remove_file(fs.path().join("fill")).unwrap();
    env.wait(&node, "no DiskPressure", 30, |v| {
        cond_status(v, "DiskPressure") == "False"
    })
    .await;
    // The evicted pod's containers are stopped, not restarted.
    let running = running_containers(&env, &uid(&be)).await;
    assert!(running.is_empty(), "evicted pod still runs {running:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn runtime_class_picks_the_handler_and_adds_its_overhead() {
    if !require_root() {
        return;
    }
    let env = env().await;
    for (name, handler) in [("fast", "runc"), ("exotic", "kata")] {
        env.api.s.create(
            "/apis/node.k8s.io/v1/runtimeclasses",
            json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                   "metadata": {"name": name}, "handler": handler}),
        );
    }
    let lim = json!({"limits": {"cpu": "100m", "memory": "32Mi"}});
    let classy = pod(
        &env,
        "classy",
        json!({"runtimeClassName": "fast", "overhead": {"cpu": "50m", "memory": "16Mi"},
               "containers": [sleeper(&env, "app", lim)]}),
    );
    env.running_and_ready("classy").await;
    let mut rt = env.p.h.runtime().await;
    let sb = rt
        .list_pod_sandbox(ListPodSandboxRequest {
            filter: Some(PodSandboxFilter {
                label_selector: [("io.kubernetes.pod.uid".to_string(), uid(&classy))].into(),
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .into_inner()
        .items;
    assert_eq!(sb[0].runtime_handler, "runc");
    let path = format!("/{}/pod{}", env.k.cgroup_root, uid(&classy));
    assert_eq!(
        memory_limit(&path).as_deref(),
        Some(&*((48u64 << 20).to_string()))
    );
    // A class that does not exist, and one whose handler the runtime lacks.
    let lost = pod(
        &env,
        "lost",
        json!({"runtimeClassName": "missing", "containers": [sleeper(&env, "app", json!({}))]}),
    );
    let odd = pod(
        &env,
        "odd",
        json!({"runtimeClassName": "exotic", "containers": [sleeper(&env, "app", json!({}))]}),
    );
    for (p, want) in [
        (&lost, "RuntimeClass \"missing\" not found"),
        (&odd, "\"kata\""),
    ] {
        let u = uid(p);
        wait_until("FailedCreatePodSandBox", &env, 60, || {
            env.api.s.list("events").iter().any(|e| {
                e["involvedObject"]["uid"] == u.as_str()
                    && e["reason"] == "FailedCreatePodSandBox"
                    && e["message"].as_str().unwrap_or("").contains(want)
            })
        })
        .await;
        assert_eq!(common::cluster::sandboxes(&env.p.h.endpoint(), &u).await, 0);
    }
    assert_eq!(phase_of(&env, "lost"), "Pending");
}

/// `--max-pods` is the node's `pods` capacity, and admission holds it: a
/// pod past it is refused as the kubelet refuses it (Failed, OutOfpods,
/// an event), with nothing made in the runtime; a refused pod holds no
/// place.
#[tokio::test(flavor = "multi_thread")]
async fn a_pod_past_max_pods_is_refused_out_of_pods() {
    if !require_root() {
        return;
    }
    let env = env_with(TOKEN, vec!["--max-pods".into(), "2".into()]).await;
    let node = env
        .wait(&env.node_path(), "node capacity", 60, |v| {
            v["status"]["capacity"]["pods"].is_string()
        })
        .await;
    assert_eq!(node["status"]["capacity"]["pods"], "2");
    for name in ["one", "two"] {
        env.create(name, env.sleeper());
        env.running_and_ready(name).await;
    }
    let three = env.create("three", env.sleeper());
    let refused = env
        .wait(&env.pod_path("three"), "refused", 60, |v| {
            v["status"]["phase"] == "Failed"
        })
        .await;
    assert_eq!(refused["status"]["reason"], "OutOfpods");
    assert_eq!(
        refused["status"]["message"],
        "Node didn't have enough resource: pods, requested: 1, used: 2, capacity: 2"
    );
    let u = uid(&three);
    assert!(env.event_reasons(&u).contains(&"OutOfpods".to_string()));
    assert_eq!(common::cluster::sandboxes(&env.p.h.endpoint(), &u).await, 0);
    // The refused pod holds no place: a fourth, once one is gone, runs.
    env.api.s.delete(&env.pod_path("one"), Some(1));
    env.wait_gone(&env.pod_path("one"), 60).await;
    env.create("four", env.sleeper());
    env.running_and_ready("four").await;
    assert_eq!(phase_of(&env, "three"), "Failed");
}
