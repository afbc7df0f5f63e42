//! Prometheus metrics through a real husk serve: scrapes before, during
//! and after a pod's life, and the counters, histograms and gauges moving
//! as they must (RPCs by method and code, pods and containers by state,
//! an image pull and its bytes, CNI ADD and DEL, shims, an OOM kill, the
//! process); no pod or container id in any label; an address that cannot
//! be bound stops the server at its start, naming the key.
#![allow(clippy::unwrap_used)]

mod common;

use common::ctr::*;
use common::pod;
use common::scrape::{scrape, value};
use husk::api::cri::*;
use std::io::{Read, Write};

#[tokio::test(flavor = "multi_thread")]
async fn metrics_follow_a_pods_life() {
    if !common::require_root() {
        return;
    }
    let port = common::free_port();
    let p = pod::setup_with_metrics(port).await;
    let before = scrape(port);
    for help in [
        "# TYPE husk_grpc_requests_total counter",
        "# TYPE husk_grpc_request_duration_seconds histogram",
        "# TYPE husk_pods gauge",
        "# TYPE husk_image_pull_bytes_total counter",
        "# TYPE process_resident_memory_bytes gauge",
    ] {
        assert!(before.contains(help), "{help}: {before}");
    }
    assert!(value(&before, "process_resident_memory_bytes") > 1e6);

    let app = app_image(&p).await;
    let pc = pod_config(&p, "metrics");
    let pod_id = pod::run(&p.h, pc.clone()).await.unwrap();
    let web = create_start(&p.h, &pod_id, &pc, shell(&app, "web", "sleep 3600", &[])).await;
    let mut hog = shell(&app, "hog", "tail /dev/zero", &[]);
    hog.linux.as_mut().unwrap().resources = Some(LinuxContainerResources {
        memory_limit_in_bytes: 16 << 20,
        ..Default::default()
    });
    let hog = create_start(&p.h, &pod_id, &pc, hog).await;
    let st = wait_exited(&p.h, &hog).await;
    assert_eq!(st.reason, "OOMKilled");
    let e = exec_sync(&p.h, "no-such-container", &["true"])
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);

    let during = scrape(port);
    let grew = |sample: &str| value(&during, sample) - value(&before, sample);
    assert_eq!(
        grew(r#"husk_grpc_requests_total{method="RunPodSandbox",code="OK"}"#),
        1.0
    );
    assert_eq!(
        grew(r#"husk_grpc_requests_total{method="CreateContainer",code="OK"}"#),
        2.0
    );
    assert!(grew(r#"husk_grpc_requests_total{method="ExecSync",code="NotFound"}"#) >= 1.0);
    assert_eq!(
        grew(r#"husk_grpc_request_duration_seconds_count{method="RunPodSandbox"}"#),
        1.0
    );
    assert!(
        value(
            &during,
            r#"husk_grpc_request_duration_seconds_sum{method="RunPodSandbox"}"#
        ) > 0.0
    );
    assert!(grew(r#"husk_image_pulls_total{result="ok"}"#) >= 1.0);
    assert!(
        grew("husk_image_pull_bytes_total") > 0.0,
        "the app image's layers"
    );
    assert_eq!(grew(r#"husk_cni_duration_seconds_count{op="add"}"#), 1.0);
    assert_eq!(grew("husk_container_oom_kills_total"), 1.0);
    assert_eq!(value(&during, r#"husk_pods{state="ready"}"#), 1.0);
    assert_eq!(value(&during, r#"husk_containers{state="running"}"#), 1.0);
    assert_eq!(value(&during, r#"husk_containers{state="exited"}"#), 1.0);
    assert!(value(&during, "husk_shim_starts_total") >= 1.0);
    for id in [&pod_id, &web, &hog] {
        assert!(!during.contains(id.as_str()), "an id in a label: {id}");
    }

    stop_remove(&p.h, &web).await;
    p.h.runtime()
        .await
        .remove_container(RemoveContainerRequest { container_id: hog })
        .await
        .unwrap();
    stop_remove_pod(&p.h, &pod_id).await;
    let after = scrape(port);
    assert_eq!(value(&after, r#"husk_pods{state="ready"}"#), 0.0);
    assert_eq!(value(&after, r#"husk_containers{state="running"}"#), 0.0);
    assert_eq!(
        value(&after, r#"husk_cni_duration_seconds_count{op="del"}"#)
            - value(&before, r#"husk_cni_duration_seconds_count{op="del"}"#),
        1.0
    );
    assert_eq!(pod::leftovers(&p), Vec::<String>::new());

    // Anything but /metrics is not found.
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 404"), "{out}");
}

#[test]
fn an_address_in_use_stops_the_server_at_its_start() {
    if !common::require_root() {
        return;
    }
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("none.toml"), "").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_husk"))
        .arg("serve")
        .arg("--root")
        .arg(d.path().join("root"))
        .arg("--state")
        .arg(d.path().join("run"))
        .arg("--listen")
        .arg(d.path().join("run/husk.sock"))
        .arg("--config")
        .arg(d.path().join("none.toml"))
        .args(["--metrics-address", &format!("127.0.0.1:{port}")])
        .env("NOTIFY_SOCKET", "")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("metrics.address"), "{err}");
    assert!(
        !d.path().join("run/husk.sock").exists(),
        "nothing was served"
    );
    // Nor left mounted: the root's and state's binds go with the start.
    assert_eq!(common::mounts_under(d.path()), Vec::<String>::new());
}
