//! OpenTelemetry traces through a real husk serve and an in-test OTLP
//! receiver (the collector's gRPC TraceService): a RunPodSandbox sent
//! with a W3C `traceparent` arrives as one connected trace under that
//! parent, with husk's stages, the CNI plugins and the shim's own work in
//! it; unsampled and parentless calls are not traced at ratio 0; the
//! settings follow a reload; a collector that never answers costs
//! dropped and failed spans (counted), never a call; a bad setting is
//! refused and the old kept.
#![allow(clippy::unwrap_used)]

mod common;

use common::otlp::{Received, Receiver};
use common::pod;
use common::scrape::{scrape, value};
use husk::api::cri::*;
use std::collections::HashMap;

fn ids() -> (String, String) {
    (
        format!("{:032x}", rand::random::<u128>()),
        format!("{:016x}", rand::random::<u64>() | 1),
    )
}

fn traced<T>(msg: T, trace: &str, parent: &str, sampled: bool) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    let flags = if sampled { "01" } else { "00" };
    r.metadata_mut().insert(
        "traceparent",
        format!("00-{trace}-{parent}-{flags}").parse().unwrap(),
    );
    r
}

fn named<'a>(spans: &'a [Received], name: &str) -> &'a Received {
    spans
        .iter()
        .find(|s| s.span.name == name)
        .unwrap_or_else(|| panic!("no span {name:?} in {:?}", names(spans)))
}

fn names(spans: &[Received]) -> Vec<&str> {
    spans.iter().map(|s| s.span.name.as_str()).collect()
}

fn children<'a>(spans: &'a [Received], of: &Received) -> Vec<&'a Received> {
    spans
        .iter()
        .filter(|s| s.parent_id() == of.span_id())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_traced_run_pod_sandbox_is_one_connected_trace() {
    if !common::require_root() {
        return;
    }
    let r = Receiver::start().await;
    let config = format!(
        "[tracing]\nendpoint = \"{}\"\nsampling_ratio = 0.0\n",
        r.endpoint()
    );
    let p = pod::setup_config(vec![], "/usr/lib/cni", vec![], &config).await;
    let mut rt = p.h.runtime().await;
    let (trace, parent) = ids();
    let pod_id = rt
        .run_pod_sandbox(traced(
            RunPodSandboxRequest {
                config: Some(p.config("traced")),
                ..Default::default()
            },
            &trace,
            &parent,
            true,
        ))
        .await
        .unwrap()
        .into_inner()
        .pod_sandbox_id;
    // Not traced at ratio 0: no parent, or a parent that is not sampled.
    rt.version(VersionRequest::default()).await.unwrap();
    let (unsampled, up) = ids();
    rt.list_pod_sandbox(traced(
        ListPodSandboxRequest::default(),
        &unsampled,
        &up,
        false,
    ))
    .await
    .unwrap();
    // A malformed or oversized traceparent is no parent: the call answers
    // and, at ratio 0, is not traced.
    for bad in [
        "00-zz-1-01".to_string(),
        format!("00-{unsampled}-{}-01", "f".repeat(8 << 10)),
        "ff-ffffffffffffffffffffffffffffffff-ffffffffffffffff-ff".to_string(),
    ] {
        let mut r = tonic::Request::new(ListContainersRequest::default());
        r.metadata_mut().insert("traceparent", bad.parse().unwrap());
        rt.list_containers(r).await.unwrap();
    }

    let rpc = "runtime.v1.RuntimeService/RunPodSandbox";
    let spans = r
        .trace(&trace, 30, |s| {
            let n = names(s);
            n.contains(&rpc) && n.contains(&"husk-shim Create") && n.contains(&"CNI ADD")
        })
        .await;
    // The call's span, under the caller's.
    let root = named(&spans, rpc);
    print_tree(&spans, root, 0);
    assert_eq!(root.parent_id(), parent);
    assert_eq!(root.span.kind, 2, "a server span");
    assert_eq!(root.attr("rpc.method").as_deref(), Some("RunPodSandbox"));
    assert_eq!(
        root.attr("rpc.service").as_deref(),
        Some("runtime.v1.RuntimeService")
    );
    assert_eq!(root.attr("rpc.grpc.status_code").as_deref(), Some("0"));
    assert_eq!(root.resource_attr("service.name").as_deref(), Some("husk"));
    // Connected: every other span's parent is one of the trace's.
    let by_id: HashMap<String, &Received> = spans.iter().map(|s| (s.span_id(), s)).collect();
    assert_eq!(by_id.len(), spans.len(), "span ids are unique");
    for s in &spans {
        if s.span_id() == root.span_id() {
            continue;
        }
        let up = by_id
            .get(&s.parent_id())
            .unwrap_or_else(|| panic!("{} has no parent in {:?}", s.span.name, names(&spans)));
        // Inside its parent's time (5 ms for two processes' clocks read
        // at different moments).
        let slack = 5_000_000;
        assert!(
            s.span.start_time_unix_nano + slack >= up.span.start_time_unix_nano
                && s.span.end_time_unix_nano <= up.span.end_time_unix_nano + slack
                && s.span.start_time_unix_nano <= s.span.end_time_unix_nano,
            "{} is not inside {}",
            s.span.name,
            up.span.name
        );
    }
    // husk's stages, under the call.
    for stage in ["validate", "namespaces", "shim", "pause", "record"] {
        assert_eq!(named(&spans, stage).parent_id(), root.span_id(), "{stage}");
    }
    // The CNI ADD, and its plugins under it.
    let cni = named(&spans, "CNI ADD");
    let plugins: Vec<&str> = children(&spans, cni)
        .iter()
        .map(|s| s.span.name.as_str())
        .collect();
    assert!(plugins.contains(&"bridge"), "{plugins:?}");
    assert!(plugins.contains(&"portmap"), "{plugins:?}");
    // The shim's work: the call to it, its handling there (in the shim's
    // own process), and libcontainer's create and start inside.
    let call = named(&spans, "shim Create");
    assert_eq!(call.span.kind, 3, "a client span");
    let served = named(&spans, "husk-shim Create");
    assert_eq!(served.parent_id(), call.span_id());
    let shim = pod::shim_pid(&p.h, &pod_id).to_string();
    assert_eq!(served.attr("process.pid"), Some(shim.clone()));
    assert_ne!(shim, p.h.pid().to_string());
    for step in ["runtime create", "runtime start"] {
        let s = named(&spans, step);
        assert_eq!(s.parent_id(), served.span_id(), "{step}");
        assert_eq!(s.attr("husk.runtime").as_deref(), Some("libcontainer"));
    }
    // Nothing of the untraced calls.
    let all = r.spans();
    assert!(all.iter().all(|s| s.trace_id() != unsampled), "unsampled");
    assert!(
        all.iter()
            .all(|s| s.span.name != "runtime.v1.RuntimeService/Version"),
        "a parentless call at ratio 0"
    );
    assert!(
        all.iter()
            .all(|s| s.span.name != "runtime.v1.RuntimeService/ListContainers"),
        "a call with a malformed traceparent"
    );
    common::ctr::stop_remove_pod(&p.h, &pod_id).await;
}

/// The trace as an indented tree, with each span's milliseconds.
fn print_tree(spans: &[Received], at: &Received, depth: usize) {
    let ms = (at.span.end_time_unix_nano - at.span.start_time_unix_nano) as f64 / 1e6;
    eprintln!(
        "{:indent$}{} {ms:.2} ms",
        "",
        at.span.name,
        indent = depth * 2
    );
    let mut kids = children(spans, at);
    kids.sort_by_key(|s| s.span.start_time_unix_nano);
    for k in kids {
        print_tree(spans, k, depth + 1);
    }
}

async fn versions(p: &pod::Pod, n: usize) {
    let mut rt = p.h.runtime().await;
    for _ in 0..n {
        let (t, s) = ids();
        rt.version(traced(VersionRequest::default(), &t, &s, true))
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn tracing_follows_reloads_and_a_dead_collector_costs_only_spans() {
    if !common::require_root() {
        return;
    }
    let r = Receiver::start().await;
    let port = common::free_port();
    let p = pod::setup_with_metrics(port).await;
    let conf_d = p.h.dir.path().join("conf.d");
    std::fs::create_dir_all(&conf_d).unwrap();
    // Off: nothing is sent, traceparent or not.
    versions(&p, 3).await;

    // A collector that accepts connections and never answers: the export
    // hangs until its timeout, the queue of 4 fills, later spans drop.
    let blackhole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = blackhole.local_addr().unwrap().port();
    std::fs::write(
        conf_d.join("50-tracing.toml"),
        format!("[tracing]\nendpoint = \"127.0.0.1:{dead}\"\nqueue_size = 4\n"),
    )
    .unwrap();
    let said = p.h.reload().await;
    assert!(said.contains("config reloaded"), "{said}");
    versions(&p, 5).await;
    // The first batch is in its export by now; every call still answers.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    versions(&p, 30).await;
    let m = scrape(port);
    assert!(
        value(&m, "husk_trace_spans_dropped_total") >= 1.0,
        "{}",
        m.lines()
            .filter(|l| l.contains("trace"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let failed = wait_for!(30, "the hung export to time out", {
        let v = value(&scrape(port), "husk_trace_spans_failed_total");
        (v >= 1.0).then_some(v)
    });
    assert!(failed >= 1.0);
    assert_eq!(value(&m, "husk_trace_spans_exported_total"), 0.0);

    // To the live receiver, every trace kept: a parentless call is traced.
    std::fs::write(
        conf_d.join("50-tracing.toml"),
        format!(
            "[tracing]\nendpoint = \"{}\"\nsampling_ratio = 1.0\n",
            r.endpoint()
        ),
    )
    .unwrap();
    let said = p.h.reload().await;
    assert!(said.contains("config reloaded"), "{said}");
    let mut rt = p.h.runtime().await;
    rt.status(StatusRequest::default()).await.unwrap();
    let status = "runtime.v1.RuntimeService/Status";
    let got = wait_for!(30, "the Status span", {
        r.spans().into_iter().find(|s| s.span.name == status)
    });
    assert_eq!(got.parent_id(), "", "a trace that starts at husk");
    assert!(
        r.spans()
            .iter()
            .all(|s| s.span.name != "runtime.v1.RuntimeService/Version"),
        "a Version span from before tracing went to this receiver"
    );

    // A bad setting: refused with its key, and the old settings kept.
    std::fs::write(
        conf_d.join("60-bad.toml"),
        "[tracing]\nendpoint = \"https://collector:4317\"\n",
    )
    .unwrap();
    let said = p.h.reload().await;
    assert!(
        said.contains("config reload failed") && said.contains("tracing.endpoint"),
        "{said}"
    );
    let (t, s) = ids();
    p.h.images()
        .await
        .image_fs_info(traced(ImageFsInfoRequest::default(), &t, &s, true))
        .await
        .ok();
    let spans = r.trace(&t, 30, |s| !s.is_empty()).await;
    assert_eq!(
        names(&spans),
        ["runtime.v1.ImageService/ImageFsInfo"],
        "still tracing to the receiver"
    );
    drop(blackhole);
}

/// `husk check`'s tracing line for a config whose `[tracing]` is `table`.
fn check_tracing(table: &str) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.toml");
    std::fs::write(&cfg, table).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_husk"))
        .args(["check", "--json", "--config"])
        .arg(&cfg)
        .arg("--root")
        .arg(dir.path().join("root"))
        .arg("--listen")
        .arg(dir.path().join("husk.sock"))
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let c = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "tracing")
        .unwrap_or_else(|| panic!("no tracing check in {report}"))
        .clone();
    (
        c["status"].as_str().unwrap().to_string(),
        c["message"].as_str().unwrap_or_default().to_string(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn husk_check_says_where_spans_go() {
    if !common::require_root() {
        return;
    }
    let (status, detail) = check_tracing("");
    assert_eq!(status, "ok");
    assert!(detail.starts_with("off"), "{detail}");
    let r = Receiver::start().await;
    let (status, detail) = check_tracing(&format!(
        "[tracing]\nendpoint = \"{}\"\nsampling_ratio = 0.25\n",
        r.endpoint()
    ));
    assert_eq!(status, "ok", "{detail}");
    assert!(
        detail.contains(&format!("127.0.0.1:{}", r.port)) && detail.contains("0.25"),
        "{detail}"
    );
    let closed = common::free_port();
    let (status, detail) =
        check_tracing(&format!("[tracing]\nendpoint = \"127.0.0.1:{closed}\"\n"));
    assert_eq!(status, "warn");
    assert!(detail.contains("refuses connections"), "{detail}");
}
