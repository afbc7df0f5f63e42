//! `husk kubelet --kubeconfig` as a node of a cluster, against the
//! stand-in API server (tests/common/apiserver.rs) and a real `husk
//! serve`: node registration, Lease heartbeats and node status; pods bound
//! to the node run, their status patched back (only on change) with
//! events; graceful deletion ends with the API object deleted (also when
//! the kubelet was down as it began); static
//! pods get mirror pods; watches that break, 410 Gone, an unreachable
//! server and wrong credentials are survived without a restart.
#![allow(clippy::unwrap_used)]

mod common;

use common::apiserver;
use common::cluster::*;
use common::kubelet::*;
use serde_json::json;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

#[test]
fn stand_in_merge_patch_and_paths() {
    use apiserver::{civil, merge, Target};
    use common::apiserver_wire::unescape;
    let mut v = json!({"a": {"b": 1, "c": 2}, "d": [1]});
    merge(&mut v, &json!({"a": {"b": null, "e": 3}, "d": [2, 3]}));
    assert_eq!(v, json!({"a": {"c": 2, "e": 3}, "d": [2, 3]}));
    let t = Target::parse("/api/v1/namespaces/ns/pods/p/status").unwrap();
    assert_eq!(t.key(), "/api/v1/namespaces/ns/pods/p");
    assert_eq!(t.sub.as_deref(), Some("status"));
    let all = Target::parse("/api/v1/pods").unwrap();
    assert!(all.lists("/api/v1/namespaces/x/pods/p"));
    assert!(!all.lists("/api/v1/namespaces/x/events/p"));
    assert_eq!(civil(0), (1970, 1, 1));
    assert_eq!(civil(19723), (2024, 1, 1));
    assert_eq!(unescape("spec.nodeName%3Dn1"), "spec.nodeName=n1");
}

#[tokio::test(flavor = "multi_thread")]
async fn node_registers_renews_its_lease_and_reports_status() {
    if !common::require_root() {
        return;
    }
    let e = env().await;
    let node = e
        .wait(&e.node_path(), "a Ready node", 30, |v| {
            cond_status(v, "Ready") == "True"
        })
        .await;
    let st = &node["status"];
    assert_eq!(
        st["addresses"][0],
        json!({"type": "InternalIP", "address": "127.0.0.1"})
    );
    assert_eq!(st["addresses"][1]["type"], "Hostname");
    assert_eq!(st["capacity"]["pods"], "110");
    assert!(
        st["capacity"]["cpu"]
            .as_str()
            .unwrap()
            .parse::<u32>()
            .unwrap()
            >= 1
    );
    assert!(st["allocatable"]["memory"]
        .as_str()
        .unwrap()
        .ends_with("Ki"));
    assert!(st["nodeInfo"]["containerRuntimeVersion"]
        .as_str()
        .unwrap()
        .starts_with("husk://"));
    assert!(st["nodeInfo"]["kubeletVersion"]
        .as_str()
        .unwrap()
        .starts_with("v1."));
    assert_eq!(st["nodeInfo"]["operatingSystem"], "linux");
    assert!(
        st["daemonEndpoints"]["kubeletEndpoint"]["Port"]
            .as_i64()
            .unwrap()
            > 0
    );
    for c in ["MemoryPressure", "DiskPressure", "PIDPressure"] {
        assert!(!cond_status(&node, c).is_empty(), "{c} missing: {node}");
    }
    assert_eq!(
        node["metadata"]["labels"]["kubernetes.io/hostname"],
        e.k.node.as_str()
    );
    // The Lease is held by the node and renewed.
    let lease = e
        .wait(&e.lease_path(), "the node lease", 30, |v| {
            !v["spec"]["renewTime"].is_null()
        })
        .await;
    assert_eq!(lease["spec"]["holderIdentity"], e.k.node.as_str());
    assert_eq!(lease["metadata"]["ownerReferences"][0]["kind"], "Node");
    let first = lease["spec"]["renewTime"].clone();
    e.wait(&e.lease_path(), "a renewed lease", 30, |v| {
        v["spec"]["renewTime"] != first
    })
    .await;
    // A Node deleted behind the kubelet's back is registered again.
    e.api.s.delete(&e.node_path(), Some(0));
    e.wait(&e.node_path(), "the node registered again", 30, |v| {
        cond_status(v, "Ready") == "True"
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn api_pods_run_report_status_and_delete_gracefully() {
    if !common::require_root() {
        return;
    }
    let e = env().await;
    let created = e.create("web", e.sleeper());
    let uid = created["metadata"]["uid"].as_str().unwrap().to_string();
    let v = e.running_and_ready("web").await;
    let st = &v["status"];
    assert!(!st["podIP"].as_str().unwrap_or("").is_empty(), "{v}");
    assert_eq!(st["podIPs"][0]["ip"], st["podIP"]);
    assert_eq!(st["hostIP"], "127.0.0.1");
    assert!(!st["startTime"].is_null());
    for c in [
        "PodScheduled",
        "PodReadyToStartContainers",
        "Initialized",
        "ContainersReady",
        "Ready",
    ] {
        assert_eq!(cond_status(&v, c), "True", "{c}: {v}");
    }
    let c = container(&v, "app");
    assert!(
        c["containerID"].as_str().unwrap().starts_with("husk://"),
        "{c}"
    );
    assert!(!c["imageID"].as_str().unwrap().is_empty(), "{c}");
    assert_eq!(c["ready"], true);
    assert_eq!(c["started"], true);
    assert_eq!(c["restartCount"], 0);
    assert!(!c["state"]["running"]["startedAt"].is_null());
    // Events, as the kubelet's recorder names them.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = e.event_reasons(&uid);
        if ["Pulling", "Pulled", "Created", "Started"]
            .iter()
            .all(|x| r.iter().any(|y| y == x))
        {
            break;
        }
        assert!(Instant::now() < deadline, "events: {r:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Status is patched only when it changes.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let patches = e.api.s.count("PATCH", "/pods/web/status");
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        e.api.s.count("PATCH", "/pods/web/status"),
        patches,
        "steady status re-patched"
    );
    assert_eq!(sandboxes(&e.p.h.endpoint(), &uid).await, 1);
    // Graceful deletion: containers stopped, then the object deleted.
    e.api.s.delete(&e.pod_path("web"), Some(5));
    e.wait_gone(&e.pod_path("web"), 30).await;
    assert_eq!(sandboxes(&e.p.h.endpoint(), &uid).await, 0);
    assert!(e.event_reasons(&uid).iter().any(|r| r == "Killing"));
    assert!(e.k.log().contains("pod is being deleted"));
    // A second delete with a shorter grace period cuts a long one short
    // (sleep as PID 1 ignores SIGTERM: only the kill ends it).
    let slow = e.create("slow", e.sleeper());
    let slow_uid = slow["metadata"]["uid"].as_str().unwrap().to_string();
    e.running_and_ready("slow").await;
    e.api.s.delete(&e.pod_path("slow"), Some(120));
    e.wait(&e.pod_path("slow"), "Killing", 10, |_| {
        e.event_reasons(&slow_uid).iter().any(|r| r == "Killing")
    })
    .await;
    let t = Instant::now();
    e.api.s.delete(&e.pod_path("slow"), Some(1));
    e.wait_gone(&e.pod_path("slow"), 30).await;
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "took {:?}",
        t.elapsed()
    );
    assert_eq!(sandboxes(&e.p.h.endpoint(), &slow_uid).await, 0);
    assert_eq!(
        e.k.log().matches("pod removed").count(),
        2,
        "{}",
        tail(&e.k.log(), 30)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_deleted_while_the_kubelet_is_down_is_finished_after_its_restart() {
    if !common::require_root() {
        return;
    }
    let mut env = env().await;
    env.create("gone", env.sleeper());
    let uid = env.running_and_ready("gone").await["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    env.k.kill9();
    env.api.s.delete(&env.pod_path("gone"), Some(5));
    assert!(
        env.api.s.get(&env.pod_path("gone")).unwrap()["metadata"]["deletionTimestamp"].is_string()
    );
    env.k.spawn();
    // The restarted kubelet tears it down and then deletes the object.
    env.wait_gone(&env.pod_path("gone"), 60).await;
    assert_eq!(sandboxes(&env.p.h.endpoint(), &uid).await, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_the_node_cannot_run_is_failed_with_a_reason() {
    if !common::require_root() {
        return;
    }
    let e = env().await;
    e.api.s.create(
        "/api/v1/namespaces/default/pods",
        json!({"metadata": {"name": "nfs"},
               "spec": {"nodeName": e.k.node,
                        "volumes": [{"name": "v", "nfs": {"server": "127.0.0.1", "path": "/x"}}],
                        "containers": [{"name": "app", "image": e.image}]}}),
    );
    let v = e
        .wait(&e.pod_path("nfs"), "a Failed pod", 30, |v| {
            phase(v) == "Failed"
        })
        .await;
    assert!(
        !v["status"]["reason"].as_str().unwrap_or("").is_empty(),
        "{v}"
    );
    assert!(
        v["status"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("nfs"),
        "{v}"
    );
    // The node goes on: another pod runs.
    e.create("ok", e.sleeper());
    e.running_and_ready("ok").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn broken_watches_and_410_gone_run_each_pod_once() {
    if !common::require_root() {
        return;
    }
    let e = env().await;
    e.api.s.break_watches_ms.store(700, Ordering::SeqCst);
    let a = e.create("a", e.sleeper());
    e.running_and_ready("a").await;
    // History compacted while the watch is down: a resume gets 410 and relists.
    for _ in 0..3 {
        e.api.s.compact();
        tokio::time::sleep(Duration::from_millis(800)).await;
    }
    let b = e.create("b", e.sleeper());
    e.running_and_ready("b").await;
    e.api.s.compact();
    tokio::time::sleep(Duration::from_secs(3)).await;
    for p in [&a, &b] {
        let uid = p["metadata"]["uid"].as_str().unwrap();
        assert_eq!(sandboxes(&e.p.h.endpoint(), uid).await, 1, "{uid}");
    }
    // A deletion seen through a relist still ends the pod.
    e.api.s.delete(&e.pod_path("a"), Some(2));
    e.wait_gone(&e.pod_path("a"), 30).await;
    assert!(e.api.s.count("GET", "/api/v1/pods") > 5);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_api_server_is_survived() {
    if !common::require_root() {
        return;
    }
    let e = env().await;
    let created = e.create("web", e.sleeper());
    let uid = created["metadata"]["uid"].as_str().unwrap().to_string();
    e.running_and_ready("web").await;
    e.api.s.unavailable.store(true, Ordering::SeqCst);
    let before = e.api.s.get(&e.lease_path()).unwrap();
    tokio::time::sleep(Duration::from_secs(8)).await;
    // The pod kept running, and the failures were logged once per cause.
    assert_eq!(sandboxes(&e.p.h.endpoint(), &uid).await, 1);
    let log = e.k.log();
    let lines = log
        .lines()
        .filter(|l| l.contains("API server call failed"))
        .count();
    assert!(
        (1..=8).contains(&lines),
        "{lines} failure lines:\n{}",
        tail(&log, 40)
    );
    e.api.s.unavailable.store(false, Ordering::SeqCst);
    e.wait(&e.lease_path(), "the lease renewed again", 30, |v| {
        v["spec"]["renewTime"] != before["spec"]["renewTime"]
    })
    .await;
    assert!(e.k.log().contains("API server reachable again"));
    // Changes made after the outage are acted on.
    e.api.s.delete(&e.pod_path("web"), Some(2));
    e.wait_gone(&e.pod_path("web"), 30).await;
    assert_eq!(sandboxes(&e.p.h.endpoint(), &uid).await, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn static_pods_get_mirror_pods() {
    if !common::require_root() {
        return;
    }
    let e = env().await;
    e.k.write(
        "web.yaml",
        &format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: web}}\nspec:\n  containers:\n  - {{name: app, image: {}, command: [/bin/sleep, '3600']}}\n", e.image),
    );
    let name = e.k.pod_name("web");
    let m = e
        .wait(&e.pod_path(&name), "a Running mirror pod", 60, |v| {
            phase(v) == "Running"
        })
        .await;
    let static_uid = e.k.status("web").unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        m["metadata"]["annotations"]["kubernetes.io/config.mirror"],
        static_uid.as_str()
    );
    assert_ne!(m["metadata"]["uid"], static_uid.as_str());
    assert_eq!(m["metadata"]["ownerReferences"][0]["kind"], "Node");
    assert_eq!(m["spec"]["nodeName"], e.k.node.as_str());
    assert!(container(&m, "app")["containerID"]
        .as_str()
        .unwrap()
        .starts_with("husk://"));
    // A mirror deleted by hand comes back.
    e.api.s.delete(&e.pod_path(&name), Some(0));
    e.wait(&e.pod_path(&name), "the mirror pod again", 30, |v| {
        v["metadata"]["uid"] != m["metadata"]["uid"]
    })
    .await;
    // The manifest removed: the mirror goes too.
    e.k.remove("web.yaml");
    e.wait_gone(&e.pod_path(&name), 60).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn wrong_credentials_are_reported_and_recovered_from() {
    if !common::require_root() {
        return;
    }
    let e = env_with("a-revoked-token", vec![]).await;
    e.k.write(
        "web.yaml",
        &format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: web}}\nspec:\n  containers:\n  - {{name: app, image: {}, command: [/bin/sleep, '3600']}}\n", e.image),
    );
    // Static pods run without the API server.
    e.k.wait("web", "Running", 60, |v| phase(v) == "Running")
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let log = e.k.log();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("API server call failed"))
        .collect();
    assert!(!lines.is_empty() && lines.len() <= 8, "{lines:?}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("401") || l.contains("Unauthorized")),
        "{lines:?}"
    );
    assert!(e.api.s.get(&e.node_path()).is_none());
    // The credential becomes valid (a rotated token): the node joins.
    *e.api.s.token.lock().unwrap() = "a-revoked-token".into();
    e.wait(&e.node_path(), "the node registered", 60, |v| {
        cond_status(v, "Ready") == "True"
    })
    .await;
    e.k.remove("web.yaml");
    e.k.wait_gone("web", 60).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn secrets_config_maps_tokens_and_the_downward_api_reach_the_pod() {
    if !common::require_root() {
        return;
    }
    use base64::Engine as _;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let e = env().await;
    // An image only a pull secret opens.
    let private = common::registry::Registry::start_with(Some(("puller", "s3cret")));
    let img = common::images::Image::new(vec![common::images::Layer::new(
        &common::images::busybox_entries(),
        common::images::Compression::Gzip,
    )]);
    common::images::Pusher::new(&private)
        .image("private/busybox", "1", &img, common::images::Format::Oci)
        .await;
    let image = format!("{}/private/busybox:1", private.host());
    let s = &e.api.s;
    let ns = "/api/v1/namespaces/default";
    s.create(
        &format!("{ns}/services"),
        json!({"metadata": {"name": "kubernetes"}, "spec": {"clusterIP": "10.0.0.1", "ports": [{"name": "https", "port": 443, "protocol": "TCP"}]}}),
    );
    s.create(
        &format!("{ns}/configmaps"),
        json!({"metadata": {"name": "c1"}, "data": {"greeting": "hello", "A": "1"}}),
    );
    s.create(
        &format!("{ns}/configmaps"),
        json!({"metadata": {"name": "kube-root-ca.crt"}, "data": {"ca.crt": "CA PEM"}}),
    );
    let dockercfg =
        json!({"auths": {private.host(): {"username": "puller", "password": "s3cret"}}})
            .to_string();
    s.create(
        &format!("{ns}/secrets"),
        json!({"metadata": {"name": "regcred"}, "type": "kubernetes.io/dockerconfigjson",
               "data": {".dockerconfigjson": b64(&dockercfg)}}),
    );
    let script = "echo \"env $SECRET $GREETING $CM_A $MY_NAME\"; echo \"secret $(cat /etc/s/password)\"; \
                  echo \"cm $(cat /etc/c/g/greet)\"; T=/var/run/secrets/kubernetes.io/serviceaccount; \
                  echo \"sa $(cat $T/token) $(cat $T/namespace) $(cat $T/ca.crt)\"; echo \"labels $(cat /etc/pod/labels)\"; \
                  echo \"svc $KUBERNETES_SERVICE_HOST $KUBERNETES_PORT\"; touch /etc/s/x 2>/dev/null && echo writable || echo readonly; sleep 3600";
    s.create(
        &format!("{ns}/pods"),
        json!({"metadata": {"name": "objs", "labels": {"tier": "web"}},
               "spec": {"nodeName": e.k.node, "terminationGracePeriodSeconds": 1,
                        "imagePullSecrets": [{"name": "regcred"}],
                        "volumes": [
                            {"name": "s", "secret": {"secretName": "s1"}},
                            {"name": "c", "configMap": {"name": "c1", "items": [{"key": "greeting", "path": "g/greet"}]}},
                            {"name": "kube-api-access", "projected": {"sources": [
                                {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]}},
                            {"name": "pod", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}],
                        "containers": [{"name": "app", "image": image, "command": ["/bin/sh", "-c", script],
                            "env": [{"name": "SECRET", "valueFrom": {"secretKeyRef": {"name": "s1", "key": "password"}}},
                                    {"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "c1", "key": "greeting"}}},
                                    {"name": "MY_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                            "envFrom": [{"configMapRef": {"name": "c1"}, "prefix": "CM_"}],
                            "volumeMounts": [{"name": "s", "mountPath": "/etc/s"}, {"name": "c", "mountPath": "/etc/c"},
                                             {"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"},
                                             {"name": "pod", "mountPath": "/etc/pod"}]}]}}),
    );
    // The secret is missing: the pod waits (FailedMount), it does not fail.
    let v = e
        .wait(&e.pod_path("objs"), "a FailedMount event", 30, |_| {
            e.api
                .s
                .list("events")
                .iter()
                .any(|ev| ev["reason"] == "FailedMount")
        })
        .await;
    assert_eq!(phase(&v), "Pending", "{v}");
    let ev = e.api.s.list("events");
    let fm = ev.iter().find(|x| x["reason"] == "FailedMount").unwrap();
    assert!(
        fm["message"]
            .as_str()
            .unwrap()
            .contains("secret \"s1\" not found"),
        "{fm}"
    );
    // The token is refused twice (a real API server's node authorizer
    // does until it has seen the binding): the mount is retried.
    e.api
        .s
        .token_refusals
        .store(2, std::sync::atomic::Ordering::SeqCst);
    s.create(
        &format!("{ns}/secrets"),
        json!({"metadata": {"name": "s1"}, "data": {"password": b64("hunter2")}}),
    );
    let v = e.running_and_ready("objs").await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let lines = loop {
        let l = logs(&e.k, &v, "app");
        if l.len() >= 7 {
            break l;
        }
        assert!(Instant::now() < deadline, "{l:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(lines[0], "env hunter2 hello 1 objs");
    assert_eq!(lines[1], "secret hunter2");
    assert_eq!(lines[2], "cm hello");
    assert_eq!(
        lines[3],
        "sa token-for-default-bound-to-objs default CA PEM"
    );
    assert_eq!(lines[4], "labels tier=\"web\"");
    assert_eq!(lines[5], "svc 10.0.0.1 tcp://10.0.0.1:443");
    assert_eq!(
        lines[6], "readonly",
        "a secret volume must be mounted read-only"
    );
    assert!(e.api.s.count("POST", "/serviceaccounts/default/token") >= 3);
    let refused = e.api.s.list("events");
    assert!(
        refused.iter().any(|x| x["reason"] == "FailedMount"
            && x["message"]
                .as_str()
                .unwrap_or("")
                .contains("403 Forbidden")),
        "{refused:?}"
    );
    // An edited ConfigMap reaches the running pod's volume at a resync.
    let uid = v["metadata"]["uid"].as_str().unwrap();
    let file = e.k.root().join(format!(
        "pods/{uid}/volumes/kubernetes.io~configmap/c/g/greet"
    ));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "hello");
    let cm_path = format!("{ns}/configmaps/c1");
    let cm = e.api.s.get(&cm_path).unwrap();
    let mut edited = cm.clone();
    edited["data"]["greeting"] = json!("bonjour");
    e.api.s.delete(&cm_path, Some(0));
    s.create(&format!("{ns}/configmaps"), edited);
    let deadline = Instant::now() + Duration::from_secs(40);
    while std::fs::read_to_string(&file).unwrap_or_default() != "bonjour" {
        assert!(
            Instant::now() < deadline,
            "the edited ConfigMap never reached the volume"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
