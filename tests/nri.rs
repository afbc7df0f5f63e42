//! NRI through a real husk serve, proven by containerd/nri v0.12's own
//! plugins (`../shared/nri/`, static builds the suite runs from there):
//!
//! - `nri-logger` sees every event of a pod's life (resizes and the
//!   validation of adjustments included), in NRI's order, and
//!   its `Synchronize` lists the pod and container that ran before it
//!   connected; its `-add-env` reaches the container's environment.
//! - A plugin that hangs (SIGSTOP) and one killed: pods keep starting,
//!   each request bounded by the request timeout, the plugins dropped.
//! - A pre-installed plugin is started with its config and joins.
//!
//! The adjustments plugins make are `nri_adjust.rs`'s.
#![allow(clippy::unwrap_used)]

mod common;

use common::ctr::{ccfg, create_start, pod_config, sh};
use common::nri_plugin::{connected, image, Plugin};
use common::pod::*;
use husk::api::cri::*;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The events the logger logged, in order (a request logs many lines,
/// each starting with its event's name; this test's flow never repeats an
/// event back to back).
fn events(log: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut out: Vec<String> = text
        .lines()
        .filter_map(|l| l.split("msg=\"").nth(1)?.split_once(':'))
        .map(|(event, _)| event.to_string())
        .collect();
    out.dedup();
    out
}

/// The lines of the logger's `log` where it was told `event` of container
/// `id` (each telling names the container's id once).
fn said(log: &Path, event: &str, id: &str) -> Vec<usize> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .enumerate()
        .filter(|(_, l)| {
            l.contains(&format!("msg=\"{event}:")) && l.ends_with(&format!("id: {id}\""))
        })
        .map(|(i, _)| i)
        .collect()
}

/// `husk check`'s NRI line for the running server.
fn check_nri(p: &Pod) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_husk"))
        .args(["check", "--json", "--config"])
        .arg(p.h.dir.path().join("none.toml"))
        .arg("--root")
        .arg(p.h.root())
        .arg("--listen")
        .arg(p.h.socket())
        .arg("--nri-socket")
        .arg(p.h.nri_socket())
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "nri")
        .unwrap_or_else(|| panic!("no nri check in {report}"))["message"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_logger_sees_a_pod_s_life_in_order_and_what_ran_before_it() {
    if !common::require_root() {
        return;
    }
    let p = setup(vec![]).await;
    let image = image(&p).await;
    // A pod and its container, running before any plugin.
    let pc0 = pod_config(&p, "before");
    let pod0 = run(&p.h, pc0.clone()).await.unwrap();
    let c0 = create_start(
        &p.h,
        &pod0,
        &pc0,
        ccfg(&image, "c0", &["sleep", "100"], &[]),
    )
    .await;

    let log = p.h.dir.path().join("logger.log");
    let logger = Plugin::start(
        &p,
        "nri-logger",
        "10-nri-logger",
        &["-log-file", log.to_str().unwrap(), "-add-env", "NRI_ADDED"],
    )
    .await;
    let text = std::fs::read_to_string(&log).unwrap();
    let sync: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("Synchronize:"))
        .collect();
    assert!(
        sync.iter().any(|l| l.contains(&pod0)) && sync.iter().any(|l| l.contains(&c0)),
        "Synchronize lists the pod and container already there:\n{text}"
    );

    assert!(
        check_nri(&p).contains("connected: 10-nri-logger"),
        "{}",
        check_nri(&p)
    );

    let synced = events(&log).len();
    let pc = pod_config(&p, "life");
    let pod = run(&p.h, pc.clone()).await.unwrap();
    // A request over 4 KiB goes to the plugin in chunks its Go reader
    // takes (one larger chunk would hang it, and it would be dropped).
    let mut cc = ccfg(&image, "app", &["sleep", "100"], &[]);
    cc.envs = (0..200)
        .map(|i| KeyValue {
            key: format!("BIG_{i}"),
            value: "x".repeat(40).into(),
        })
        .collect();
    let c = create_start(&p.h, &pod, &pc, cc).await;
    assert!(
        sh(&p, &c, "env")
            .await
            .lines()
            .any(|l| l.starts_with("NRI_ADDED=logger-pid-")),
        "the logger's env reached the container"
    );
    let mut rt = p.h.runtime().await;
    rt.update_container_resources(UpdateContainerResourcesRequest {
        container_id: c.clone(),
        linux: Some(LinuxContainerResources {
            cpu_shares: 256,
            ..Default::default()
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    rt.update_pod_sandbox_resources(UpdatePodSandboxResourcesRequest {
        pod_sandbox_id: pod.clone(),
        resources: Some(LinuxContainerResources {
            cpu_shares: 512,
            ..Default::default()
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    rt.stop_container(StopContainerRequest {
        container_id: c.clone(),
        timeout: 0,
    })
    .await
    .unwrap();
    rt.remove_container(RemoveContainerRequest {
        container_id: c.clone(),
    })
    .await
    .unwrap();
    rt.stop_pod_sandbox(StopPodSandboxRequest {
        pod_sandbox_id: pod.clone(),
    })
    .await
    .unwrap();
    rt.remove_pod_sandbox(RemovePodSandboxRequest {
        pod_sandbox_id: pod.clone(),
    })
    .await
    .unwrap();
    let want = [
        "RunPodSandbox",
        "CreateContainer",
        "ValidateContainerAdjustment",
        "PostCreateContainer",
        "StartContainer",
        "PostStartContainer",
        "UpdateContainer",
        "PostUpdateContainer",
        "UpdatePodSandbox",
        "PostUpdatePodSandbox",
        "StopContainer",
        "RemoveContainer",
        "StopPodSandbox",
        "RemovePodSandbox",
    ];
    let got = wait_for!(10, "every event logged", {
        let e = events(&log);
        (e.len() >= synced + want.len()).then_some(e)
    });
    assert_eq!(&got[synced..], want, "all: {got:?}");

    // As containerd tells them: a container that exits by itself is told
    // stopped at its exit, and once only; one created and never started,
    // at its removal and before it.
    let pc2 = pod_config(&p, "exits");
    let pod2 = run(&p.h, pc2.clone()).await.unwrap();
    let once = create_start(&p.h, &pod2, &pc2, ccfg(&image, "once", &["true"], &[])).await;
    wait_for!(20, "the exit told", {
        (said(&log, "StopContainer", &once).len() == 1).then_some(())
    });
    let never = common::ctr::try_create(&p.h, &pod2, &pc2, ccfg(&image, "never", &["true"], &[]))
        .await
        .unwrap();
    for id in [&never, &once] {
        rt.remove_container(RemoveContainerRequest {
            container_id: id.to_string(),
        })
        .await
        .unwrap();
    }
    let removed = wait_for!(10, "the removals told", {
        let r = said(&log, "RemoveContainer", &never);
        (r.len() == 1 && said(&log, "RemoveContainer", &once).len() == 1).then_some(r)
    });
    assert_eq!(said(&log, "StopContainer", &once).len(), 1, "told once");
    let stopped = said(&log, "StopContainer", &never);
    assert_eq!(stopped.len(), 1);
    assert!(stopped[0] < removed[0], "stopped before removed");
    assert!(
        !p.h.log().contains("NRI plugin dropped"),
        "the plugin stayed in the chain"
    );
    drop(logger);
    remove_listed(&p).await;
    assert_eq!(leftovers(&p), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hung_or_killed_plugin_is_dropped_and_pods_keep_starting() {
    if !common::require_root() {
        return;
    }
    let p = setup_config(
        vec![],
        "/usr/lib/cni",
        vec![],
        "[nri]\nplugin_request_timeout_ms = 500\n",
    )
    .await;
    let image = image(&p).await;
    let hung = Plugin::start(&p, "nri-logger", "10-nri-logger", &[]).await;
    let killed = Plugin::start(&p, "nri-template", "20-nri-template", &[]).await;
    hung.signal(libc::SIGSTOP);
    killed.signal(libc::SIGKILL);
    for i in 0..3 {
        let pc = pod_config(&p, &format!("go{i}"));
        let t0 = Instant::now();
        let pod = run(&p.h, pc.clone()).await.unwrap();
        create_start(&p.h, &pod, &pc, ccfg(&image, "app", &["sleep", "100"], &[])).await;
        // Only the first pod waits for the hung plugin, once.
        assert!(
            i == 0 || t0.elapsed() < Duration::from_secs(10),
            "pod {i} took {:?}",
            t0.elapsed()
        );
    }
    let log = p.h.log();
    for id in ["10-nri-logger", "20-nri-template"] {
        assert!(
            log.lines()
                .any(|l| l.contains("NRI plugin dropped from the chain") && l.contains(id)),
            "{id} dropped:\n{log}"
        );
    }
    drop(hung);
    remove_listed(&p).await;
    assert_eq!(leftovers(&p), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pre_installed_plugin_is_started_with_its_config_and_joins() {
    if !common::require_root() {
        return;
    }
    // Written before the server starts: it starts what is there.
    let dir = tempfile::tempdir().unwrap();
    let (plugins, conf) = (dir.path().join("plugins"), dir.path().join("conf"));
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::create_dir_all(&conf).unwrap();
    std::os::unix::fs::symlink(common::shared("nri/nri-logger"), plugins.join("05-logger"))
        .unwrap();
    let log = dir.path().join("pre.log");
    std::fs::write(
        conf.join("05-logger.conf"),
        format!("logFile: {}\nevents: [RunPodSandbox]\n", log.display()),
    )
    .unwrap();
    let p = setup_with(
        vec![],
        "/usr/lib/cni",
        vec![
            "--nri-plugin-path".into(),
            plugins.display().to_string(),
            "--nri-plugin-config-path".into(),
            conf.display().to_string(),
        ],
    )
    .await;
    wait_for!(20, "05-logger to join", {
        (connected(&p, "05-logger") > 0).then_some(())
    });
    let pc = pod_config(&p, "pre");
    let pod = run(&p.h, pc.clone()).await.unwrap();
    let text = wait_for!(10, "RunPodSandbox in its log", {
        let t = std::fs::read_to_string(&log).unwrap_or_default();
        t.contains(&pod).then_some(t)
    });
    assert!(text.contains("RunPodSandbox"), "{text}");
    // Its config subscribed it to RunPodSandbox only: the stop and the
    // removal (each told to plugins before the RPC answers) are not seen.
    remove_listed(&p).await;
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        !text.contains("StopPodSandbox") && !text.contains("RemovePodSandbox"),
        "{text}"
    );
    // Hung, it is dropped at the next pod and stopped (not restarted, as
    // containerd does not restart one).
    let exe = plugins.join("05-logger").display().to_string();
    let pid = (|| {
        for e in std::fs::read_dir("/proc").ok()?.flatten() {
            let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            if cmd.split(|b| *b == 0).next() == Some(exe.as_bytes()) {
                return e.file_name().to_str()?.parse::<i32>().ok();
            }
        }
        None
    })()
    .expect("the pre-installed plugin runs");
    // SAFETY: kill(2) on the plugin the server started for this test.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let pc = pod_config(&p, "pre2");
    run(&p.h, pc).await.unwrap();
    wait_for!(20, "the hung plugin to be stopped", {
        (!Path::new(&format!("/proc/{pid}")).exists()).then_some(())
    });
    remove_listed(&p).await;
    assert_eq!(leftovers(&p), Vec::<String>::new());
}
