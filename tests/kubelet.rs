//! `husk kubelet` and `husk run` through the whole pod flow, against a
//! real `husk serve` (and, where practical, Debian's containerd 1.6):
//! init containers in order, crash-loop back-off, liveness restarts,
//! readiness gating Ready, every pull policy, edited and deleted
//! manifests (preStop), bad manifests, adoption by a restarted kubelet,
//! emptyDir shared by two containers, and a hostPort from 127.0.0.1.
#![allow(clippy::unwrap_used)]

mod common;

use common::cluster::sandboxes;
use common::images::*;
use common::kubelet::*;
use common::pod::{self, Pod};
use serde_json::Value;

/// A husk serve with a registry holding `test/busybox:1` and `:latest`,
/// and a kubelet driving it. The kubelet goes first on drop, so it tears
/// its pods down while the runtime is still there.
struct Env {
    k: Kubelet,
    p: Pod,
    image: String,
}

fn app_image() -> Image {
    Image::new(vec![Layer::new(&busybox_entries(), Compression::Gzip)])
}

async fn push_app(p: &Pod) -> String {
    let pusher = Pusher::new(&p.reg);
    let img = app_image();
    pusher.image("test/busybox", "1", &img, Format::Oci).await;
    pusher
        .image("test/busybox", "latest", &img, Format::Oci)
        .await;
    format!("{}/test/busybox:1", p.reg.host())
}

async fn husk_env() -> Env {
    let p = pod::setup(vec![]).await;
    let image = push_app(&p).await;
    let k = Kubelet::start(&p.h.endpoint(), &p.cgroup_parent);
    Env { k, p, image }
}

/// Nothing left of the test's pods: the runtime's leftovers (the QoS
/// cgroups the kubelet keeps aside), and no pod cgroup under them.
fn assert_clean(p: &Pod) {
    let left: Vec<String> = pod::leftovers(p)
        .into_iter()
        .filter(|l| !l.contains(" cgroups in "))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    for h in pod::cgroup_hierarchies() {
        for qos in ["besteffort", "burstable"] {
            let d = h.join(&p.cgroup_parent).join(qos);
            let pods: Vec<_> = std::fs::read_dir(&d)
                .into_iter()
                .flatten()
                .flatten()
                .filter(|e| e.path().is_dir())
                .collect();
            assert!(
                pods.is_empty(),
                "pod cgroups left in {}: {pods:?}",
                d.display()
            );
        }
    }
}

fn uid(v: &Value) -> String {
    v["metadata"]["uid"].as_str().unwrap().to_string()
}

fn started_at(c: &Value, state: &str) -> String {
    c[state]["terminated"]["startedAt"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

fn init_pod(image: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: init
spec:
  restartPolicy: Never
  initContainers:
  - name: first
    image: {image}
    command: [sh, -c, "echo one >> /work/order"]
    volumeMounts: [{{name: work, mountPath: /work}}]
  - name: second
    image: {image}
    command: [sh, -c, "sleep 1; echo two >> /work/order"]
    volumeMounts: [{{name: work, mountPath: /work}}]
  containers:
  - name: app
    image: {image}
    command: [sh, -c, "cat /work/order"]
    volumeMounts: [{{name: work, mountPath: /work}}]
  volumes:
  - name: work
    emptyDir: {{}}
"#
    )
}

async fn init_containers_in_order(e: &Kubelet, image: &str) {
    e.write("init.yaml", &init_pod(image));
    let v = e
        .wait("init", "Succeeded", 90, |v| phase(v) == "Succeeded")
        .await;
    let first = container(&v, "first");
    let second = container(&v, "second");
    assert_eq!(first["state"]["terminated"]["exitCode"], 0);
    assert_eq!(second["state"]["terminated"]["exitCode"], 0);
    assert_eq!(
        container(&v, "app")["state"]["terminated"]["reason"],
        "Completed"
    );
    // Each init container ran to success before the next started.
    let first_done = first["state"]["terminated"]["finishedAt"]
        .as_str()
        .unwrap()
        .to_string();
    let second_start = started_at(second, "state");
    assert!(first_done <= second_start, "{first_done} > {second_start}");
    assert!(condition(&v, "Initialized"));
    assert_eq!(logs(e, &v, "app"), vec!["one", "two"]);
    assert_eq!(
        container(&v, "app")["containerID"]
            .as_str()
            .unwrap()
            .split("://")
            .count(),
        2
    );
    e.remove("init.yaml");
    e.wait_gone("init", 60).await;
}

async fn crash_loop_backs_off(k: &Kubelet, image: &str) {
    k.write(
        "crash.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: crash}}\nspec:\n  containers:\n  - name: c\n    image: {image}\n    command: [sh, -c, 'echo attempt; exit 3']\n"
        ),
    );
    let v = k
        .wait("crash", "CrashLoopBackOff", 90, |v| {
            waiting_reason(v, "c") == "CrashLoopBackOff"
        })
        .await;
    let c = container(&v, "c");
    assert_eq!(c["lastState"]["terminated"]["exitCode"], 3);
    assert_eq!(c["lastState"]["terminated"]["reason"], "Error");
    assert!(
        c["state"]["waiting"]["message"]
            .as_str()
            .unwrap()
            .contains("back-off"),
        "{c}"
    );
    assert_eq!(
        phase(&v),
        "Running",
        "restartPolicy Always keeps the pod Running"
    );
    // Restarts go on, each after a longer back-off: 1s, then 2s (the test's
    // initial back-off), so the third restart comes at least 2s after the
    // second attempt ended.
    let v = k
        .wait("crash", "three restarts", 90, |v| restarts(v, "c") >= 3)
        .await;
    let c = container(&v, "c");
    let ended = c["lastState"]["terminated"]["finishedAt"].as_str().unwrap();
    let started = c["state"]["terminated"]["startedAt"]
        .as_str()
        .or(c["state"]["running"]["startedAt"].as_str())
        .unwrap_or("");
    if !started.is_empty() {
        let gap = secs(started) - secs(ended);
        assert!(
            gap >= 1.5,
            "third restart only {gap}s after the previous exit: {c}"
        );
    }
    assert!(k.table().contains("CrashLoopBackOff"), "{}", k.table());
    let logs = logs(k, &v, "c");
    assert!(
        logs.iter().filter(|l| *l == "attempt").count() >= 3,
        "{logs:?}"
    );
    k.remove("crash.yaml");
    k.wait_gone("crash", 60).await;
}

async fn active_deadline_fails_the_pod(k: &Kubelet, image: &str) {
    k.write(
        "deadline.yaml",
        &format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: deadline}}\nspec:\n  activeDeadlineSeconds: 2\n  terminationGracePeriodSeconds: 1\n  containers:\n  - {{name: c, image: {image}, command: [sleep, '3600']}}\n"),
    );
    k.wait("deadline", "Running", 60, |v| running(v, "c")).await;
    let v = k
        .wait("deadline", "DeadlineExceeded", 60, |v| phase(v) == "Failed")
        .await;
    assert_eq!(v["status"]["reason"], "DeadlineExceeded", "{v}");
    assert!(!container(&v, "c")["state"]["terminated"].is_null(), "{v}");
    // It stays Failed: nothing restarts it.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let v = k.status("deadline").unwrap();
    assert_eq!(phase(&v), "Failed");
    assert_eq!(restarts(&v, "c"), 0);
    k.remove("deadline.yaml");
    k.wait_gone("deadline", 60).await;
}

/// RFC 3339 to seconds.
fn secs(t: &str) -> f64 {
    let ts: k8s_openapi::jiff::Timestamp = t.parse().unwrap();
    ts.as_nanosecond() as f64 / 1e9
}

async fn liveness_restarts(k: &Kubelet, image: &str) {
    // Healthy for about two seconds, then the liveness file is gone.
    k.write(
        "live.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: live}}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: c
    image: {image}
    command: [sh, -c, "touch /tmp/healthy; sleep 2; rm /tmp/healthy; sleep 3600"]
    livenessProbe:
      exec: {{command: [cat, /tmp/healthy]}}
      periodSeconds: 1
      failureThreshold: 2
"#
        ),
    );
    let v = k
        .wait("live", "a liveness restart", 90, |v| {
            restarts(v, "c") >= 1 && running(v, "c")
        })
        .await;
    let last = &container(&v, "c")["lastState"]["terminated"];
    assert!(!last.is_null(), "{v}");
    assert!(
        k.log().contains("failed liveness probe"),
        "{}",
        tail(&k.log(), 30)
    );
    k.remove("live.yaml");
    k.wait_gone("live", 60).await;
}

async fn readiness_gates_ready(k: &Kubelet, image: &str) {
    k.write(
        "ready.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: ready}}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: web
    image: {image}
    command: [httpd, -f, -p, "8080", -h, /www]
    ports: [{{containerPort: 8080, name: http}}]
    readinessProbe:
      httpGet: {{path: /ready, port: http}}
      periodSeconds: 1
    volumeMounts: [{{name: www, mountPath: /www}}]
  volumes:
  - name: www
    emptyDir: {{}}
"#
        ),
    );
    let v = k
        .wait("ready", "the container running", 60, |v| running(v, "web"))
        .await;
    // Several probe periods later it is still not Ready: /ready is a 404.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let v2 = k.status("ready").unwrap();
    assert!(
        !condition(&v2, "Ready") && !condition(&v2, "ContainersReady"),
        "{v2}"
    );
    assert_eq!(container(&v2, "web")["ready"], false);
    assert!(k.table().contains("0/1"), "{}", k.table());
    // The emptyDir is on the node: the page appears, the pod becomes Ready.
    let www = k
        .root()
        .join("pods")
        .join(uid(&v))
        .join("volumes/kubernetes.io~empty-dir/www");
    std::fs::write(www.join("ready"), "ok").unwrap();
    let v = k
        .wait("ready", "Ready", 30, |v| condition(v, "Ready"))
        .await;
    assert_eq!(container(&v, "web")["ready"], true);
    std::fs::remove_file(www.join("ready")).unwrap();
    k.wait("ready", "not Ready again", 30, |v| !condition(v, "Ready"))
        .await;
    k.remove("ready.yaml");
    k.wait_gone("ready", 60).await;
}

async fn pull_policies(k: &Kubelet, reg: &common::registry::Registry, image: &str) {
    let host = reg.host();
    let latest = format!("{host}/test/busybox:latest");
    let missing = format!("{host}/test/busybox:missing");
    // One manifest, several documents.
    let doc = |name: &str, image: &str, policy: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  restartPolicy: Never\n  containers:\n  - name: c\n    image: {image}\n{policy}    command: [sh, -c, 'echo ran']\n"
        )
    };
    let manifest_gets = |tag: &str| {
        std::fs::read_to_string(&reg.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| {
                (l.contains("\"GET /v2/test/busybox/manifests/")
                    || l.contains("\"HEAD /v2/test/busybox/manifests/"))
                    && l.contains(&format!("/manifests/{tag} "))
            })
            .count()
    };
    // IfNotPresent (the default for a tag) pulls once.
    k.write("ifnp.yaml", &doc("ifnp", image, ""));
    k.wait("ifnp", "Succeeded", 60, |v| phase(v) == "Succeeded")
        .await;
    let pulls_1 = manifest_gets("1");
    assert!(pulls_1 >= 1, "the first start pulls");
    k.write(
        "ifnp2.yaml",
        &doc("ifnp2", image, "    imagePullPolicy: IfNotPresent\n"),
    );
    k.wait("ifnp2", "Succeeded", 60, |v| phase(v) == "Succeeded")
        .await;
    assert_eq!(
        manifest_gets("1"),
        pulls_1,
        "a present image is not pulled again"
    );
    // Never, with the image present, runs.
    k.write(
        "never.yaml",
        &doc("never", image, "    imagePullPolicy: Never\n"),
    );
    k.wait("never", "Succeeded", 60, |v| phase(v) == "Succeeded")
        .await;
    assert_eq!(manifest_gets("1"), pulls_1);
    // Always (the default for :latest) pulls for every start.
    let before = manifest_gets("latest");
    k.write(
        "always.yaml",
        &format!(
            "{}---\n{}",
            doc("always", &latest, ""),
            doc("always2", &latest, "    imagePullPolicy: Always\n")
        ),
    );
    k.wait("always", "Succeeded", 60, |v| phase(v) == "Succeeded")
        .await;
    k.wait("always2", "Succeeded", 60, |v| phase(v) == "Succeeded")
        .await;
    assert!(
        manifest_gets("latest") >= before + 2,
        "Always pulls each time"
    );
    // Never with a missing image.
    k.write(
        "nevermiss.yaml",
        &doc("nevermiss", &missing, "    imagePullPolicy: Never\n"),
    );
    let v = k
        .wait("nevermiss", "ErrImageNeverPull", 60, |v| {
            waiting_reason(v, "c") == "ErrImageNeverPull"
        })
        .await;
    let msg = container(&v, "c")["state"]["waiting"]["message"]
        .as_str()
        .unwrap();
    assert!(
        msg.contains("is not present with pull policy of Never"),
        "{msg}"
    );
    assert_eq!(phase(&v), "Pending");
    // A pull that fails: ErrImagePull, then ImagePullBackOff.
    k.write("pullfail.yaml", &doc("pullfail", &missing, ""));
    k.wait("pullfail", "ErrImagePull", 60, |v| {
        waiting_reason(v, "c") == "ErrImagePull"
    })
    .await;
    k.wait("pullfail", "ImagePullBackOff", 60, |v| {
        waiting_reason(v, "c") == "ImagePullBackOff"
    })
    .await;
    for f in ["ifnp", "ifnp2", "never", "always", "nevermiss", "pullfail"] {
        k.remove(&format!("{f}.yaml"));
    }
    for f in [
        "ifnp",
        "ifnp2",
        "never",
        "always",
        "always2",
        "nevermiss",
        "pullfail",
    ] {
        k.wait_gone(f, 60).await;
    }
}

async fn edited_manifest_recreates(k: &Kubelet, endpoint: &str, image: &str) {
    let pod = |v: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: edit}}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: {image}\n    env: [{{name: VERSION, value: '{v}'}}]\n    command: [sh, -c, 'echo $VERSION; sleep 3600']\n"
        )
    };
    k.write("edit.yaml", &pod("one"));
    let v1 = k.wait("edit", "Running", 60, |v| running(v, "c")).await;
    k.write("edit.yaml", &pod("two"));
    let v2 = k
        .wait("edit", "the edited pod running", 60, |v| {
            uid(v) != uid(&v1) && running(v, "c")
        })
        .await;
    assert_eq!(logs(k, &v2, "c"), vec!["two"]);
    assert_ne!(
        container(&v1, "c")["containerID"],
        container(&v2, "c")["containerID"]
    );
    // The old pod is gone from the runtime.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while sandboxes(endpoint, &uid(&v1)).await > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "old sandbox still there"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    k.remove("edit.yaml");
    k.wait_gone("edit", 60).await;
}

async fn deleted_manifest_runs_pre_stop(k: &Kubelet, endpoint: &str, image: &str) {
    let host = tempfile::tempdir().unwrap();
    k.write(
        "bye.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: bye}}
spec:
  terminationGracePeriodSeconds: 5
  containers:
  - name: c
    image: {image}
    command: [sleep, "3600"]
    lifecycle:
      preStop:
        exec: {{command: [sh, -c, "echo bye from $HOSTNAME > /host/prestop"]}}
    volumeMounts: [{{name: host, mountPath: /host}}]
  volumes:
  - name: host
    hostPath: {{path: {}, type: Directory}}
"#,
            host.path().display()
        ),
    );
    let v = k.wait("bye", "Running", 60, |v| running(v, "c")).await;
    let pod_dir = k.root().join("pods").join(uid(&v));
    assert!(pod_dir.exists());
    k.remove("bye.yaml");
    k.wait_gone("bye", 60).await;
    let said = std::fs::read_to_string(host.path().join("prestop")).unwrap();
    assert_eq!(said.trim(), format!("bye from {}", k.pod_name("bye")));
    assert_eq!(sandboxes(endpoint, &uid(&v)).await, 0, "sandbox removed");
    assert!(!pod_dir.exists(), "pod directory removed");
    assert!(k.table().contains("Terminating"), "{}", k.table());
}

async fn bad_manifests_are_rejected(k: &Kubelet, image: &str) {
    k.write(
        "bad.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: bad}}\nspec:\n  containers:\n  - {{name: c, image: {image}, resources: {{limits: {{memory: 12XB}}}}}}\n  - {{name: c, image: {image}}}\n"
        ),
    );
    k.write(
        "broken.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: [unclosed\n",
    );
    k.write(
        "deploy.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n",
    );
    k.write(
        "good.yaml",
        &format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: good}}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - {{name: c, image: {image}, command: [sleep, '3600']}}\n"),
    );
    let v = k.wait("bad", "Failed", 30, |v| phase(v) == "Failed").await;
    assert_eq!(v["status"]["reason"], "InvalidPod");
    let msg = v["status"]["message"].as_str().unwrap();
    assert!(msg.contains("Duplicate value \"c\""), "{msg}");
    assert!(msg.contains("limits[memory]"), "{msg}");
    // The loop goes on: the good pod runs.
    k.wait("good", "Running", 60, |v| running(v, "c")).await;
    let log = k.log();
    assert!(
        log.contains("broken.yaml") && log.contains("invalid YAML"),
        "{}",
        tail(&log, 40)
    );
    assert!(
        log.contains("\"Deployment\" is not supported"),
        "{}",
        tail(&log, 40)
    );
    assert!(k.table().contains("InvalidPod"), "{}", k.table());
    for f in ["bad", "broken", "deploy", "good"] {
        k.remove(&format!("{f}.yaml"));
    }
    k.wait_gone("bad", 30).await;
    k.wait_gone("good", 60).await;
}

async fn restarted_kubelet_adopts(k: &mut Kubelet, endpoint: &str, image: &str) {
    let doc = |name: &str| {
        format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - {{name: c, image: {image}, command: [sleep, '3600']}}\n")
    };
    k.write("keep.yaml", &doc("keep"));
    k.write("orphan.yaml", &doc("orphan"));
    let keep = k.wait("keep", "Running", 60, |v| running(v, "c")).await;
    let orphan = k.wait("orphan", "Running", 60, |v| running(v, "c")).await;
    k.kill9();
    // While the kubelet is down, one pod's manifest goes away.
    k.remove("orphan.yaml");
    std::fs::remove_file(k.status_file("keep")).unwrap();
    k.spawn();
    let again = k
        .wait("keep", "the adopted pod", 60, |v| {
            running(v, "c") && condition(v, "Ready")
        })
        .await;
    assert_eq!(uid(&again), uid(&keep));
    assert_eq!(
        container(&again, "c")["containerID"],
        container(&keep, "c")["containerID"],
        "not recreated"
    );
    assert_eq!(restarts(&again, "c"), 0);
    assert_eq!(sandboxes(endpoint, &uid(&keep)).await, 1);
    // PLEG health, as the node reports it (written every 2 s).
    let read_node = || -> Value {
        serde_json::from_slice(&std::fs::read(k.status_dir().join("node.json")).unwrap_or_default())
            .unwrap_or(Value::Null)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while read_node()["pleg"]["healthy"] != true && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let node = read_node();
    assert_eq!(node["pleg"]["healthy"], true, "{node}");
    // husk serve streams GetContainerEvents (evented PLEG); containerd 1.6
    // does not, so the kubelet relists (generic PLEG).
    let want_mode = if node["runtime"]["name"] == "husk" {
        "evented"
    } else {
        "generic"
    };
    assert_eq!(node["pleg"]["mode"], want_mode, "{node}");
    assert!(
        node["pleg"]["secondsSinceLastRelist"].as_f64().unwrap() < 10.0,
        "{node}"
    );
    // The relists are counted, those over their period among them, and
    // housekeeping's lateness is kept beside its period.
    let relists = node["pleg"]["relists"].as_u64().unwrap_or(0);
    let over = node["pleg"]["relistsOverPeriod"].as_u64();
    assert!(relists >= 1 && over.is_some_and(|o| o <= relists), "{node}");
    assert_eq!(node["housekeeping"]["periodSeconds"], 2.0, "{node}");
    assert!(
        node["housekeeping"]["longestLateSeconds"].is_f64(),
        "{node}"
    );
    // The orphan (labels of this node, no manifest) is collected, its
    // status file too.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while sandboxes(endpoint, &uid(&orphan)).await > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "orphan not collected:\n{}",
            tail(&k.log(), 40)
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    k.wait_gone("orphan", 30).await;
    k.remove("keep.yaml");
    k.wait_gone("keep", 60).await;
}

async fn shared_empty_dir(k: &Kubelet, image: &str) {
    k.write(
        "share.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: share}}
spec:
  restartPolicy: OnFailure
  containers:
  - name: writer
    image: {image}
    command: [sh, -c, "echo hello from $POD > /data/msg"]
    env: [{{name: POD, valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}}}]
    volumeMounts: [{{name: data, mountPath: /data}}]
  - name: reader
    image: {image}
    command: [sh, -c, "until [ -f /shared/msg ]; do sleep 0.1; done; cat /shared/msg"]
    volumeMounts: [{{name: data, mountPath: /shared, readOnly: true}}]
  volumes:
  - name: data
    emptyDir: {{}}
"#
        ),
    );
    let v = k
        .wait("share", "Succeeded", 60, |v| phase(v) == "Succeeded")
        .await;
    assert_eq!(
        logs(k, &v, "reader"),
        vec![format!("hello from {}", k.pod_name("share"))]
    );
    k.remove("share.yaml");
    k.wait_gone("share", 60).await;
}

async fn host_port_reaches_the_pod(k: &Kubelet, image: &str) {
    let port = common::free_port();
    k.write(
        "web.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: web}}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: web
    image: {image}
    command: [sh, -c, "mkdir -p /www && echo served by $(hostname) > /www/index.html && exec httpd -f -p 80 -h /www"]
    ports: [{{containerPort: 80, hostPort: {port}}}]
    readinessProbe:
      tcpSocket: {{port: 80}}
      periodSeconds: 1
"#
        ),
    );
    k.wait("web", "Ready", 60, |v| condition(v, "Ready")).await;
    let body = common::http_get_until(port, "/", "served by");
    assert!(
        body.contains(&format!("served by {}", k.pod_name("web"))),
        "{body}"
    );
    k.remove("web.yaml");
    k.wait_gone("web", 60).await;
}

// husk serve.

#[tokio::test(flavor = "multi_thread")]
async fn husk_init_containers_and_shared_empty_dir() {
    if !common::require_root() {
        return;
    }
    let e = husk_env().await;
    init_containers_in_order(&e.k, &e.image).await;
    shared_empty_dir(&e.k, &e.image).await;
    assert_clean(&e.p);
}

#[tokio::test(flavor = "multi_thread")]
async fn husk_crash_loop_back_off_and_liveness() {
    if !common::require_root() {
        return;
    }
    let e = husk_env().await;
    crash_loop_backs_off(&e.k, &e.image).await;
    liveness_restarts(&e.k, &e.image).await;
    active_deadline_fails_the_pod(&e.k, &e.image).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn husk_readiness_and_host_port() {
    if !common::require_root() {
        return;
    }
    let e = husk_env().await;
    readiness_gates_ready(&e.k, &e.image).await;
    host_port_reaches_the_pod(&e.k, &e.image).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn husk_pull_policies() {
    if !common::require_root() {
        return;
    }
    let e = husk_env().await;
    pull_policies(&e.k, &e.p.reg, &e.image).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn husk_edited_deleted_and_bad_manifests() {
    if !common::require_root() {
        return;
    }
    let e = husk_env().await;
    edited_manifest_recreates(&e.k, &e.p.h.endpoint(), &e.image).await;
    deleted_manifest_runs_pre_stop(&e.k, &e.p.h.endpoint(), &e.image).await;
    bad_manifests_are_rejected(&e.k, &e.image).await;
    assert_clean(&e.p);
}

#[tokio::test(flavor = "multi_thread")]
async fn husk_restarted_kubelet_adopts_its_pods() {
    if !common::require_root() {
        return;
    }
    let mut e = husk_env().await;
    let ep = e.p.h.endpoint();
    restarted_kubelet_adopts(&mut e.k, &ep, &e.image).await;
}

// Debian's containerd 1.6, driven by the same kubelet, unchanged.

struct CtrdEnv {
    k: Kubelet,
    c: common::containerd::Containerd,
    image: String,
}

async fn containerd_env() -> Option<CtrdEnv> {
    if !common::require_root() || !common::containerd::Containerd::available() {
        return None;
    }
    let c = common::containerd::Containerd::start().await;
    let pusher = Pusher::new(&c.reg);
    let img = app_image();
    pusher.image("test/busybox", "1", &img, Format::Oci).await;
    pusher
        .image("test/busybox", "latest", &img, Format::Oci)
        .await;
    let image = format!("{}/test/busybox:1", c.reg.host());
    let k = Kubelet::start(&c.endpoint(), &c.cgroup_parent);
    Some(CtrdEnv { k, c, image })
}

#[tokio::test(flavor = "multi_thread")]
async fn containerd_init_containers_crash_loop_and_pre_stop() {
    let Some(e) = containerd_env().await else {
        return;
    };
    init_containers_in_order(&e.k, &e.image).await;
    crash_loop_backs_off(&e.k, &e.image).await;
    deleted_manifest_runs_pre_stop(&e.k, &e.c.endpoint(), &e.image).await;
    assert!(
        e.k.log().contains("no GetContainerEvents"),
        "containerd 1.6 has no event stream: generic PLEG"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn containerd_readiness_host_port_and_pull_policies() {
    let Some(e) = containerd_env().await else {
        return;
    };
    readiness_gates_ready(&e.k, &e.image).await;
    host_port_reaches_the_pod(&e.k, &e.image).await;
    pull_policies(&e.k, &e.c.reg, &e.image).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn containerd_restarted_kubelet_adopts_its_pods() {
    let Some(mut e) = containerd_env().await else {
        return;
    };
    let ep = e.c.endpoint();
    restarted_kubelet_adopts(&mut e.k, &ep, &e.image).await;
    liveness_restarts(&e.k, &e.image).await;
}

// husk run.

fn husk_run(p: &Pod, dir: &std::path::Path, manifest: &str, extra: &[&str]) -> (i32, String) {
    let file = dir.join(format!("pod-{:08x}.yaml", rand::random::<u32>()));
    std::fs::write(&file, manifest).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_husk"))
        .arg("run")
        .arg(&file)
        .args(["--runtime-endpoint", &p.h.endpoint()])
        .args(["--root", &dir.join("root").display().to_string()])
        .args(["--pod-log-root", &dir.join("logs").display().to_string()])
        .args(["--cgroup-root", &format!("/{}", p.cgroup_parent)])
        .args([
            "--node-name",
            "run-node",
            "--timeout",
            "90s",
            "--log-level",
            "info",
        ])
        .args(extra)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

#[tokio::test(flavor = "multi_thread")]
async fn husk_run_reports_the_pod_outcome() {
    if !common::require_root() {
        return;
    }
    let p = pod::setup(vec![]).await;
    let image = push_app(&p).await;
    let dir = tempfile::tempdir().unwrap();
    // Completes: its logs stream, exit 0, and the pod is removed.
    let (code, out) = husk_run(
        &p,
        dir.path(),
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: hello}}\nspec:\n  restartPolicy: Never\n  initContainers:\n  - {{name: prep, image: {image}, command: [sh, -c, 'echo preparing']}}\n  containers:\n  - {{name: app, image: {image}, command: [sh, -c, 'echo hello from $(hostname); echo second line']}}\n"
        ),
        &[],
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("[prep] preparing"), "{out}");
    assert!(out.contains("[app] hello from hello"), "{out}");
    assert!(out.contains("[app] second line"), "{out}");
    assert!(
        out.contains("Succeeded") && out.contains("removed"),
        "{out}"
    );
    // Fails: the container's exit code.
    let (code, out) = husk_run(
        &p,
        dir.path(),
        &format!("metadata: {{name: fails}}\nspec:\n  restartPolicy: Never\n  containers:\n  - {{name: app, image: {image}, command: [sh, -c, 'echo giving up >&2; exit 7']}}\n"),
        &[],
    );
    assert_eq!(code, 7, "{out}");
    assert!(
        out.contains("[app] giving up") && out.contains("exited with 7"),
        "{out}"
    );
    // Becomes Ready: exit 0 once the readiness probe passes.
    let (code, out) = husk_run(
        &p,
        dir.path(),
        &format!("metadata: {{name: serves}}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: app\n    image: {image}\n    command: [sh, -c, 'touch /tmp/ok; sleep 3600']\n    readinessProbe: {{exec: {{command: [cat, /tmp/ok]}}, periodSeconds: 1}}\n"),
        &["--table"],
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("Ready") && out.contains("1/1"), "{out}");
    // Rejected by admission: exit 1 with the reason.
    let (code, out) = husk_run(
        &p,
        dir.path(),
        "metadata: {name: Invalid}\nspec:\n  containers: []\n",
        &[],
    );
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("InvalidPod") && out.contains("spec.containers: Required value"),
        "{out}"
    );
    // Unreadable: a clear error.
    let (code, out) = husk_run(&p, dir.path(), "kind: Pod\nmetadata: [\n", &[]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("invalid YAML"), "{out}");
    assert_clean(&p);
}

/// A plain HTTP server on 127.0.0.1 answering every request with `body`.
async fn serve_manifest(
    body: std::sync::Arc<std::sync::Mutex<String>>,
) -> (u16, tokio::task::JoinHandle<()>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let h = tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let text = body.lock().unwrap().clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let resp = format!(
                    "HTTP/1.0 200 OK\r\nContent-Type: application/yaml\r\nContent-Length: {}\r\n\r\n{text}",
                    text.len()
                );
                let _ = s.write_all(resp.as_bytes()).await;
            });
        }
    });
    (port, h)
}

#[tokio::test(flavor = "multi_thread")]
async fn husk_manifest_url_source() {
    if !common::require_root() {
        return;
    }
    let p = pod::setup(vec![]).await;
    let image = push_app(&p).await;
    let doc = |v: &str| {
        format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: fromurl}}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - {{name: c, image: {image}, command: [sh, -c, 'echo {v}; sleep 3600']}}\n")
    };
    let body = std::sync::Arc::new(std::sync::Mutex::new(doc("one")));
    let (port, server) = serve_manifest(body.clone()).await;
    let url = format!("http://127.0.0.1:{port}/pods.yaml");
    let k = Kubelet::start_with(
        &p.h.endpoint(),
        &p.cgroup_parent,
        vec![
            "--manifest-url".into(),
            url,
            "--http-check-frequency".into(),
            "1s".into(),
        ],
    );
    let v1 = k.wait("fromurl", "Running", 60, |v| running(v, "c")).await;
    assert_eq!(
        v1["metadata"]["annotations"]["kubernetes.io/config.source"],
        "http"
    );
    assert_eq!(logs(&k, &v1, "c"), vec!["one"]);
    // A changed manifest at the URL replaces the pod.
    *body.lock().unwrap() = doc("two");
    let v2 = k
        .wait("fromurl", "the new pod", 60, |v| {
            uid(v) != uid(&v1) && running(v, "c")
        })
        .await;
    assert_eq!(logs(&k, &v2, "c"), vec!["two"]);
    // An empty answer deletes it.
    body.lock().unwrap().clear();
    k.wait_gone("fromurl", 60).await;
    assert_eq!(
        sandboxes(&p.h.endpoint(), &uid(&v2)).await,
        0,
        "{}",
        k.log()
    );
    drop(k);
    server.abort();
    assert_clean(&p);
}
