//! Runtime handlers through a real husk serve: pods under an OCI handler
//! (Debian's runc, which setup installs) driven by husk's shim, from the
//! pause to execs, a stop's exit code, a server restart and a killed
//! shim, with the runtime's own state gone at the end; and the refusals:
//! an unknown handler (InvalidArgument naming the configured ones), a
//! runtime that is not there or fails (FailedPrecondition with what it
//! said), one that hangs (DeadlineExceeded, the call killed), and the
//! features an OCI runtime lacks, each with nothing left behind.
#![allow(clippy::unwrap_used)]

mod common;

use common::ctr::*;
use common::pod::{self, leftovers, run_under};
use husk::api::cri::*;
use std::path::Path;
use tonic::Code;

/// Debian's runc, as setup installs it.
fn runc() -> std::path::PathBuf {
    husk::sandbox::handlers::find_binary("runc")
        .unwrap_or_else(|e| panic!("these tests need runc (setup installs Debian's): {e}"))
}

fn runc_features() -> husk::sandbox::handlers::OciFeatures {
    let out = std::process::Command::new(runc())
        .arg("features")
        .output()
        .unwrap();
    if out.status.success() {
        husk::sandbox::handlers::parse_features(&out.stdout)
    } else {
        Default::default()
    }
}

/// The containers runc's state root under this server holds.
fn runc_state(p: &pod::Pod) -> Vec<String> {
    pod::runtime_state(p, "runc")
}

async fn log_has(p: &pod::Pod, name: &str, want: &str) -> String {
    let log =
        p.h.dir
            .path()
            .join("logs")
            .join("oci")
            .join(name)
            .join("0.log");
    wait_for!(30, format!("{want:?} in {}", log.display()), {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.contains(want).then_some(text)
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn an_oci_handler_runs_pods_through_the_shim() {
    if !common::require_root() {
        return;
    }
    runc();
    let mut p = pod::setup(vec![]).await;
    let app = app_image(&p).await;

    // Status: the default, husk's own and runc, runc with what its
    // `features` claims.
    let st = p.h.runtime_status().await;
    let names: Vec<&str> = st
        .runtime_handlers
        .iter()
        .map(|h| h.name.as_str())
        .collect();
    assert_eq!(names, ["", "husk", "runc"]);
    let husk_f = st.runtime_handlers[1].features.unwrap();
    let runc_f = st.runtime_handlers[2].features.unwrap();
    let claims = runc_features();
    assert_eq!(
        runc_f.recursive_read_only_mounts,
        husk_f.recursive_read_only_mounts && claims.rro
    );
    assert_eq!(
        runc_f.user_namespaces,
        husk_f.user_namespaces && claims.idmap
    );

    let pc = pod_config(&p, "oci");
    let pod_id = run_under(&p.h, pc.clone(), "runc").await.unwrap();
    assert_eq!(
        pod::status(&p.h, &pod_id)
            .await
            .unwrap()
            .status
            .unwrap()
            .runtime_handler,
        "runc"
    );
    assert_eq!(runc_state(&p), vec![pod_id.clone()], "the pause is runc's");

    let script = "echo started; trap 'echo bye; exit 7' TERM; while true; do sleep 0.1; done";
    let web = create_start(&p.h, &pod_id, &pc, shell(&app, "web", script, &[])).await;
    assert!(runc_state(&p).contains(&web), "{:?}", runc_state(&p));
    log_has(&p, "web", "started").await;
    let r = exec_sync(
        &p.h,
        &web,
        &["/bin/sh", "-c", "echo hi; echo err >&2; exit 3"],
    )
    .await
    .unwrap();
    assert_eq!(
        (r.stdout.as_slice(), r.stderr.as_slice(), r.exit_code),
        (&b"hi\n"[..], &b"err\n"[..], 3)
    );
    // The exec runs in the container: its PID namespace, its init as 1.
    let r = exec_sync(&p.h, &web, &["/bin/sh", "-c", "cat /proc/1/cmdline"])
        .await
        .unwrap();
    assert!(
        String::from_utf8_lossy(&r.stdout).contains("/bin/sh"),
        "{r:?}"
    );

    // Its cgroup is husk's to read and update, whatever runs it.
    let mut rt = p.h.runtime().await;
    rt.update_container_resources(UpdateContainerResourcesRequest {
        container_id: web.clone(),
        linux: Some(LinuxContainerResources {
            memory_limit_in_bytes: 96 << 20,
            ..Default::default()
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    let r = exec_sync(
        &p.h,
        &web,
        &["/bin/cat", "/sys/fs/cgroup/memory/memory.limit_in_bytes"],
    )
    .await
    .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&r.stdout).trim(),
        (96u64 << 20).to_string()
    );
    let stats = rt
        .container_stats(ContainerStatsRequest {
            container_id: web.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .stats
        .unwrap();
    assert!(stats.memory.unwrap().working_set_bytes.unwrap().value > 0);

    // A server killed and restarted finds it running, and execs go on.
    p.h.kill9();
    p.h.restart().await;
    let st = container_status(&p.h, &web).await;
    assert_eq!(st.state, ContainerState::ContainerRunning as i32);
    let r = exec_sync(&p.h, &web, &["/bin/echo", "again"])
        .await
        .unwrap();
    assert_eq!(r.stdout, b"again\n");

    // A stop: the signal reaches the payload, its exit code is kept.
    let mut rt = p.h.runtime().await;
    rt.stop_container(StopContainerRequest {
        container_id: web.clone(),
        timeout: 10,
    })
    .await
    .unwrap();
    let st = container_status(&p.h, &web).await;
    assert_eq!(
        (st.state, st.exit_code),
        (ContainerState::ContainerExited as i32, 7)
    );
    log_has(&p, "web", "bye").await;
    rt.remove_container(RemoveContainerRequest {
        container_id: web.clone(),
    })
    .await
    .unwrap();
    assert!(!runc_state(&p).contains(&web), "runc's state of it is gone");

    // A shim killed with a container running: the pod still goes, and
    // runc's state with it (the shim that replaces it finds the record).
    let idle = create_start(&p.h, &pod_id, &pc, shell(&app, "idle", "sleep 3600", &[])).await;
    let shim = pod::shim_pid(&p.h, &pod_id);
    // SAFETY: kill(2) of the test's own shim.
    unsafe { libc::kill(shim as i32, libc::SIGKILL) };
    wait_for!(
        10,
        "the shim to die",
        (!pod::alive(shim as i32)).then_some(())
    );
    let mut rt = p.h.runtime().await;
    rt.stop_pod_sandbox(StopPodSandboxRequest {
        pod_sandbox_id: pod_id.clone(),
    })
    .await
    .unwrap();
    rt.remove_container(RemoveContainerRequest { container_id: idle })
        .await
        .unwrap();
    rt.remove_pod_sandbox(RemovePodSandboxRequest {
        pod_sandbox_id: pod_id,
    })
    .await
    .unwrap();
    assert_eq!(runc_state(&p), Vec::<String>::new());
    assert_eq!(leftovers(&p), Vec::<String>::new());
}

fn script(dir: &Path, name: &str, body: &str) -> String {
    let path = dir.join(name);
    common::write_executable(&path, &format!("#!/bin/sh\n{body}\n"));
    path.display().to_string()
}

/// Processes whose command line holds `what`.
fn running(what: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(what))
        })
        .count()
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_handlers_are_refused_and_leave_nothing() {
    if !common::require_root() {
        return;
    }
    let bins = tempfile::tempdir().unwrap();
    // A runtime that refuses to create, saying why; one that never answers.
    let failing = script(
        bins.path(),
        "failing-runtime",
        r#"for a in "$@"; do case "$a" in create) echo "boom: no such device" >&2; exit 1;; esac; done; exit 0"#,
    );
    let hung = script(bins.path(), "hung-runtime", "exec sleep 600");
    let config = format!(
        r#"
[runtimes.missing]
type = "oci"
path = "/nonexistent/bin/runc"

[runtimes.failing]
type = "oci"
path = "{failing}"

[runtimes.hung]
type = "oci"
path = "{hung}"
timeout_secs = 1
"#
    );
    let p = pod::setup_config(vec![], "/usr/lib/cni", vec![], &config).await;
    let app = app_image(&p).await;
    let names: Vec<String> =
        p.h.runtime_status()
            .await
            .runtime_handlers
            .into_iter()
            .map(|h| h.name)
            .collect();
    assert_eq!(
        names,
        ["", "failing", "hung", "husk", "runc"],
        "no runtime, no handler"
    );

    let pc = pod_config(&p, "bad");
    let e = run_under(&p.h, pc.clone(), "kata").await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    for name in ["failing", "hung", "husk", "missing", "runc"] {
        assert!(e.message().contains(&format!("{name:?}")), "{e:?}");
    }
    let e = run_under(&p.h, pc.clone(), "missing").await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("/nonexistent/bin/runc"), "{e:?}");
    assert_eq!(leftovers(&p), Vec::<String>::new());

    let e = run_under(&p.h, pc.clone(), "failing").await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("boom: no such device"), "{e:?}");
    assert_eq!(leftovers(&p), Vec::<String>::new());

    let e = run_under(&p.h, pc.clone(), "hung").await.unwrap_err();
    assert_eq!(e.code(), Code::DeadlineExceeded, "{e:?}");
    assert_eq!(leftovers(&p), Vec::<String>::new());
    assert_eq!(running(&hung), 0, "each hung call was killed");

    // What Debian's runc cannot do is refused, not half done.
    let claims = runc_features();
    if !claims.idmap {
        let mut upc = pod_config(&p, "userns");
        upc.linux
            .get_or_insert_with(Default::default)
            .security_context
            .get_or_insert_with(Default::default)
            .namespace_options
            .get_or_insert_with(Default::default)
            .userns_options = Some(UserNamespace {
            mode: NamespaceMode::Pod as i32,
            uids: vec![IdMapping {
                host_id: 1 << 20,
                container_id: 0,
                length: 65536,
            }],
            gids: vec![IdMapping {
                host_id: 1 << 20,
                container_id: 0,
                length: 65536,
            }],
        });
        let e = run_under(&p.h, upc, "runc").await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains("idmap"), "{e:?}");
    }
    let husk_rro = p.h.runtime_status().await.runtime_handlers[0]
        .features
        .unwrap()
        .recursive_read_only_mounts;
    if husk_rro && !claims.rro {
        let pod_id = run_under(&p.h, pc.clone(), "runc").await.unwrap();
        let mut c = shell(&app, "rro", "sleep 1", &[]);
        c.mounts = vec![Mount {
            host_path: bins.path().display().to_string(),
            container_path: "/ro".into(),
            readonly: true,
            recursive_read_only: true,
            ..Default::default()
        }];
        let e = try_create(&p.h, &pod_id, &pc, c).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains("rro"), "{e:?}");
        stop_remove_pod(&p.h, &pod_id).await;
    }
    assert_eq!(runc_state(&p), Vec::<String>::new());
    assert_eq!(leftovers(&p), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn images_are_pulled_for_any_configured_handler() {
    if !common::require_root() {
        return;
    }
    let p = pod::setup(vec![]).await;
    let app = app_image(&p).await;
    let pull = |handler: &str| {
        let (h, app, handler) = (&p.h, app.clone(), handler.to_string());
        async move {
            h.images()
                .await
                .pull_image(PullImageRequest {
                    image: Some(ImageSpec {
                        image: app,
                        runtime_handler: handler,
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .await
        }
    };
    let id = pull("runc").await.unwrap().into_inner().image_ref;
    assert_eq!(pull("").await.unwrap().into_inner().image_ref, id);
    let e = pull("kata").await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("\"runc\""), "{e:?}");
}

/// A kubelet whose CreateContainer deadline passes goes while the
/// container is being made (here: while its runtime's create takes two
/// seconds to fail). The create still runs to its end and unwinds, and
/// the container's name is released: the retry under the same name gets
/// the runtime's own error, never "name is reserved" for a container that
/// is not there; and nothing is left.
#[tokio::test(flavor = "multi_thread")]
async fn a_caller_gone_mid_create_leaves_no_name_reserved() {
    if !common::require_root() {
        return;
    }
    let bins = tempfile::tempdir().unwrap();
    let mode = bins.path().join("mode");
    let flaky = script(
        bins.path(),
        "flaky-runtime",
        &format!(
            r#"if [ "$(cat {})" = slow ]; then for a in "$@"; do case "$a" in create) sleep 2; echo "slowboom" >&2; exit 1;; esac; done; fi; exec /usr/sbin/runc "$@""#,
            mode.display()
        ),
    );
    std::fs::write(&mode, "ok").unwrap();
    let config = format!("[runtimes.flaky]\ntype = \"oci\"\npath = \"{flaky}\"\n");
    let p = pod::setup_config(vec![], "/usr/lib/cni", vec![], &config).await;
    let app = app_image(&p).await;
    let pc = pod_config(&p, "gone");
    let pod_id = run_under(&p.h, pc.clone(), "flaky").await.unwrap();

    std::fs::write(&mode, "slow").unwrap();
    let c = shell(&app, "late", "sleep 1", &[]);
    let gone = tokio::time::timeout(
        std::time::Duration::from_millis(500),
        try_create(&p.h, &pod_id, &pc, c.clone()),
    )
    .await;
    assert!(
        gone.is_err(),
        "the caller went before the create ended: {gone:?}"
    );
    let mut last = None;
    for _ in 0..300 {
        match try_create(&p.h, &pod_id, &pc, c.clone()).await {
            Err(e) if e.code() == Code::AlreadyExists => {
                last = Some(e);
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            other => {
                let e = other.expect_err("the runtime still fails");
                assert!(e.message().contains("slowboom"), "{e:?}");
                last = None;
                break;
            }
        }
    }
    assert!(last.is_none(), "the name stayed reserved: {last:?}");
    let listed =
        p.h.runtime()
            .await
            .list_containers(ListContainersRequest::default())
            .await
            .unwrap()
            .into_inner()
            .containers;
    assert_eq!(listed.len(), 0, "no container was made: {listed:?}");

    std::fs::write(&mode, "ok").unwrap();
    stop_remove_pod(&p.h, &pod_id).await;
    assert_eq!(runc_state(&p), Vec::<String>::new());
    assert_eq!(leftovers(&p), Vec::<String>::new());
}
