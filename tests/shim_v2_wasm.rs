//! A WebAssembly runtime as a shim v2 handler: runwasi's
//! `containerd-shim-wasmtime-v1` runs a WASI program (assembled here from
//! WAT with Debian's wabt) from an image whose layer carries the module,
//! in a pod through husk serve; its output reaches the CRI log and its
//! exit code comes back.
//!
//! runwasi is built from its repository (a Rust workspace of some 540
//! crates, longer to build than CI's budget) and `../shared/` does not
//! carry it, so this test runs where `HUSK_WASMTIME_SHIM` names the
//! binary: `cargo test --test shim_v2_wasm -- --ignored`.
#![allow(clippy::unwrap_used)]

mod common;

use common::ctr::*;
use common::images::{Compression, Entry, Format, Image, Layer, Pusher};
use common::pod::{self, leftovers, run_under};
use husk::api::cri::*;

/// A WASI program that prints a line and exits with 3.
const WAT: &str = r#"(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))
  (memory 1)
  (export "memory" (memory 0))
  (data (i32.const 16) "hello from wasm\0a")
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const 16))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))
    (call $proc_exit (i32.const 3))))
"#;

fn wasm() -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let (src, out) = (dir.path().join("hello.wat"), dir.path().join("hello.wasm"));
    std::fs::write(&src, WAT).unwrap();
    let st = std::process::Command::new("wat2wasm")
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .status()
        .expect("wat2wasm (Debian's wabt; setup installs it)");
    assert!(st.success());
    std::fs::read(out).unwrap()
}

/// husk's config: runwasi's wasmtime shim as the `wasmtime` handler.
fn config() -> String {
    let shim = std::env::var("HUSK_WASMTIME_SHIM")
        .expect("HUSK_WASMTIME_SHIM names runwasi's containerd-shim-wasmtime-v1");
    format!(
        r#"
[runtimes.wasmtime]
type = "shim"
runtime_type = "io.containerd.wasmtime.v1"
path = "{shim}"
timeout_secs = 20
"#
    )
}

/// `wasm/hello:v1`: an image whose layer carries the module, its
/// entrypoint the module (runwasi's image with the module in its rootfs).
async fn push_wasm(reg: &common::registry::Registry) {
    let img = Image::with_config(
        vec![Layer::new(
            &[Entry::File("hello.wasm".into(), wasm(), 0o755)],
            Compression::Gzip,
        )],
        "amd64",
        serde_json::json!({"Entrypoint": ["/hello.wasm"]}),
    );
    Pusher::new(reg)
        .image("wasm/hello", "v1", &img, Format::Oci)
        .await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs runwasi's containerd-shim-wasmtime-v1 (HUSK_WASMTIME_SHIM)"]
async fn a_wasi_program_runs_in_a_pod_through_runwasi() {
    if !common::require_root() {
        return;
    }
    let config = config();
    let p = pod::setup_config(vec![], "/usr/lib/cni", vec![], &config).await;
    push_wasm(&p.reg).await;
    let image = format!("{}/wasm/hello:v1", p.reg.host());
    p.h.pull(&image).await.unwrap();

    let pc = pod_config(&p, "wasm");
    let pod_id = run_under(&p.h, pc.clone(), "wasmtime").await.unwrap();
    let mut c = ccfg(&image, "hello", &[], &[]);
    c.command = vec![];
    let id = create_start(&p.h, &pod_id, &pc, c).await;
    let st = wait_for!(60, "the module to exit", {
        let st = container_status(&p.h, &id).await;
        (st.state == ContainerState::ContainerExited as i32).then_some(st)
    });
    assert_eq!(st.exit_code, 3, "{st:?}");
    let log =
        p.h.dir
            .path()
            .join("logs")
            .join("wasm")
            .join("hello")
            .join("0.log");
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(text.contains(" stdout F hello from wasm"), "{text:?}");

    let mut rt = p.h.runtime().await;
    rt.remove_container(RemoveContainerRequest { container_id: id })
        .await
        .unwrap();
    rt.stop_pod_sandbox(StopPodSandboxRequest {
        pod_sandbox_id: pod_id.clone(),
    })
    .await
    .unwrap();
    rt.remove_pod_sandbox(RemovePodSandboxRequest {
        pod_sandbox_id: pod_id,
    })
    .await
    .unwrap();
    assert_eq!(leftovers(&p), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs runwasi's containerd-shim-wasmtime-v1 (HUSK_WASMTIME_SHIM)"]
async fn a_wasm_pod_runs_through_the_kubelet_with_a_runtime_class() {
    if !common::require_root() {
        return;
    }
    let env = common::cluster::env_config(&config()).await;
    push_wasm(&env.p.reg).await;
    env.api.s.create(
        "/apis/node.k8s.io/v1/runtimeclasses",
        serde_json::json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
               "metadata": {"name": "wasm"}, "handler": "wasmtime"}),
    );
    env.api.s.create(
        "/api/v1/namespaces/default/pods",
        serde_json::json!({"metadata": {"name": "wasi"},
               "spec": {"nodeName": env.k.node, "runtimeClassName": "wasm",
                        "restartPolicy": "Never", "terminationGracePeriodSeconds": 5,
                        "containers": [{"name": "hello",
                                        "image": format!("{}/wasm/hello:v1", env.p.reg.host())}]}}),
    );
    let done = env
        .wait(&env.pod_path("wasi"), "the module's exit", 90, |v| {
            v["status"]["phase"] == "Failed"
        })
        .await;
    let t = &done["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(t["exitCode"], 3, "{done}");
    let mut rt = env.p.h.runtime().await;
    let sb = rt
        .list_pod_sandbox(ListPodSandboxRequest::default())
        .await
        .unwrap()
        .into_inner()
        .items;
    assert_eq!(sb.len(), 1);
    assert_eq!(sb[0].runtime_handler, "wasmtime");
    let logs = common::kubelet::logs(&env.k, &done, "hello").join("\n");
    assert!(logs.contains("hello from wasm"), "{logs:?}");
    env.api.s.delete(&env.pod_path("wasi"), Some(0));
    env.wait_gone(&env.pod_path("wasi"), 60).await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs runwasi's containerd-shim-wasmtime-v1 (HUSK_WASMTIME_SHIM)"]
async fn an_oci_wasm_image_runs_from_the_content_store() {
    use husk::api::containerd_services::content::{content_client::ContentClient, InfoRequest};
    if !common::require_root() {
        return;
    }
    let p = pod::setup_config(vec![], "/usr/lib/cni", vec![], &config()).await;
    let (layer, _) = common::images::push_wasm_oci(&p.reg, "wasm/oci", "v1", &wasm()).await;
    let image = format!("{}/wasm/oci:v1", p.reg.host());
    p.h.pull(&image).await.unwrap();
    let pc = pod_config(&p, "wasm");
    let pod_id = run_under(&p.h, pc.clone(), "wasmtime").await.unwrap();
    // Twice: the first run compiles the module and stores it, the second
    // runs what was stored.
    for name in ["first", "second"] {
        let mut c = ccfg(&image, name, &[], &[]);
        c.command = vec![];
        let id = create_start(&p.h, &pod_id, &pc, c).await;
        let st = wait_for!(60, "the module to exit", {
            let st = container_status(&p.h, &id).await;
            (st.state == ContainerState::ContainerExited as i32).then_some(st)
        });
        assert_eq!(st.exit_code, 3, "{name}: {st:?}");
        let log = std::path::Path::new(&pc.log_directory).join(format!("{name}/0.log"));
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            text.contains(" stdout F hello from wasm"),
            "{name}: {text:?}"
        );
    }
    // The shim's precompiled module is in husk's store, named by a label
    // on the layer.
    let ch = husk::api::connect(&format!(
        "unix://{}",
        p.h.dir.path().join("run").join("shim-v2.sock").display()
    ))
    .await
    .unwrap();
    let info = ContentClient::new(ch)
        .info(InfoRequest {
            digest: layer.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .info
        .unwrap();
    assert!(
        info.labels
            .keys()
            .any(|k| k.starts_with("runwasi.io/precompiled/wasmtime/")),
        "{info:?}"
    );
    stop_remove_pod(&p.h, &pod_id).await;
    assert_eq!(leftovers(&p), Vec::<String>::new());
}
