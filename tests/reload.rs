//! Drop-ins and SIGHUP through a real husk serve: a drop-in of
//! `<config dir>/conf.d` overrides the main file; SIGHUP applies a new log
//! level and a new sandbox image while a pod keeps running; a bad drop-in
//! is reported with its file and key and changes nothing; `husk config
//! dump` says where each value came from.
#![allow(clippy::unwrap_used)]

mod common;

use common::images::Pusher;
use common::pod::{self, leftovers, pause_image};
use husk::api::cri::*;

fn log_since(p: &pod::Pod, from: usize) -> String {
    p.h.log()[from..].to_string()
}

async fn version(p: &pod::Pod) {
    p.h.runtime()
        .await
        .version(VersionRequest::default())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn sighup_reloads_what_can_change_while_pods_run() {
    if !common::require_root() {
        return;
    }
    let p = pod::setup_config(vec![], "/usr/lib/cni", vec![], "log_level = \"info\"\n").await;
    let conf_d = p.h.dir.path().join("conf.d");
    std::fs::create_dir_all(&conf_d).unwrap();
    let pod_a = pod::run(&p.h, p.config("a")).await.unwrap();

    // At info, an RPC's debug line is not written.
    let mark = p.h.log().len();
    version(&p).await;
    assert!(
        !log_since(&p, mark).contains("rpc ok"),
        "{}",
        log_since(&p, mark)
    );

    // A drop-in: debug, and another pause image.
    Pusher::new(&p.reg)
        .image(
            "k8s/pause",
            "other",
            &pause_image(),
            common::images::Format::Oci,
        )
        .await;
    let other = format!("{}/k8s/pause:other", p.reg.host());
    std::fs::write(
        conf_d.join("50-ops.toml"),
        format!("log_level = \"debug\"\nsandbox_image = \"{other}\"\n"),
    )
    .unwrap();
    let said = p.h.reload().await;
    assert!(said.contains("config reloaded"), "{said}");
    let mark = p.h.log().len();
    version(&p).await;
    assert!(
        log_since(&p, mark).contains("rpc ok"),
        "{}",
        log_since(&p, mark)
    );
    let pod_b = pod::run(&p.h, p.config("b")).await.unwrap();
    assert!(
        p.h.status(&other).await.is_some(),
        "the new pause image was pulled"
    );
    let a = pod::status(&p.h, &pod_a).await.unwrap().status.unwrap();
    assert_eq!(
        a.state,
        PodSandboxState::SandboxReady as i32,
        "pod a runs on"
    );

    // A bad drop-in: named with its key, and nothing changes.
    std::fs::write(
        conf_d.join("60-bad.toml"),
        "log_level = \"warn\"\nbogus_key = 1\n",
    )
    .unwrap();
    let said = p.h.reload().await;
    assert!(
        said.contains("config reload failed")
            && said.contains("60-bad.toml")
            && said.contains("bogus_key"),
        "{said}"
    );
    let mark = p.h.log().len();
    version(&p).await;
    assert!(
        log_since(&p, mark).contains("rpc ok"),
        "still debug: {}",
        log_since(&p, mark)
    );

    // `husk config dump` names each value's origin.
    let dump = std::process::Command::new(env!("CARGO_BIN_EXE_husk"))
        .args(["config", "dump", "--config"])
        .arg(p.h.dir.path().join("none.toml"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&dump.stdout);
    let stderr = String::from_utf8_lossy(&dump.stderr);
    assert_eq!(dump.status.code(), Some(2), "the bad drop-in: {stderr}");
    assert!(
        stderr.contains("60-bad.toml") && stderr.contains("line 2"),
        "{stderr}"
    );
    std::fs::remove_file(conf_d.join("60-bad.toml")).unwrap();
    let dump = std::process::Command::new(env!("CARGO_BIN_EXE_husk"))
        .args(["config", "dump", "--log-format", "json", "--config"])
        .arg(p.h.dir.path().join("none.toml"))
        .output()
        .unwrap();
    let text2 = String::from_utf8_lossy(&dump.stdout);
    assert!(dump.status.success(), "{text}");
    let line = |k: &str| {
        text2
            .lines()
            .find(|l| l.starts_with(k))
            .unwrap_or_else(|| panic!("{k}: {text2}"))
            .to_string()
    };
    assert!(
        line("log_level = \"debug\"").ends_with("50-ops.toml"),
        "{text2}"
    );
    assert!(
        line("log_format = \"json\"").ends_with("# --log-format"),
        "{text2}"
    );
    assert!(line("root = ").ends_with("# default"), "{text2}");

    for id in [pod_a, pod_b] {
        common::ctr::stop_remove_pod(&p.h, &id).await;
    }
    assert_eq!(leftovers(&p), Vec::<String>::new());
}
