//! Shim v2 runtimes (`type = "shim"` handlers) through a real husk serve,
//! with containerd 2.3.4's own runc shim from `../shared/shims` (running
//! runc 1.4.3 beside it): a pod's sandbox and containers as tasks of one
//! shim, their output in the CRI log through the shim's FIFOs, execs,
//! exit codes from the shim's events, a server restart, a shim killed
//! with -9 (its tasks cleaned by its `delete`, its containers exited), and
//! nothing left; and the refusals: a binary not there, options the shim
//! rejects.
#![allow(clippy::unwrap_used)]

mod common;

use common::ctr::*;
use common::pod::{self, leftovers, run_under};
use husk::api::cri::*;
use tonic::Code;

fn handler_config() -> String {
    format!(
        r#"
[runtimes.runc-v2]
type = "shim"
runtime_type = "io.containerd.runc.v2"
path = "{shim}"

[runtimes.runc-v2.options]
BinaryName = "{runc}"
"#,
        shim = common::shared("shims/containerd-shim-runc-v2").display(),
        runc = common::shared("shims/runc-1.4.3").display(),
    )
}

/// The shim processes running for this server (their `-address` is its).
fn shim_servers(p: &pod::Pod) -> Vec<i32> {
    let addr =
        p.h.dir
            .path()
            .join("run")
            .join("shim-v2.sock")
            .display()
            .to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            (cmd.contains("containerd-shim-runc-v2") && cmd.contains(&addr)).then_some(pid)
        })
        .collect()
}

/// Sockets the runtime's shims left in this server's socket dir.
fn v2_sockets(p: &pod::Pod) -> Vec<String> {
    std::fs::read_dir(p.h.dir.path().join("run").join("v2s"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

async fn log_has(p: &pod::Pod, name: &str, want: &str) -> String {
    let log =
        p.h.dir
            .path()
            .join("logs")
            .join("v2")
            .join(name)
            .join("0.log");
    wait_for!(30, format!("{want:?} in {}", log.display()), {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.contains(want).then_some(text)
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shim_v2_handler_runs_a_pod_through_containerds_runc_shim() {
    if !common::require_root() {
        return;
    }
    let mut p = pod::setup_config(vec![], "/usr/lib/cni", vec![], &handler_config()).await;
    let app = app_image(&p).await;
    // Status: the handler, with what its shim's `-info` says its runc can
    // do (runc 1.4.3: rro mounts and idmapped mounts), as far as husk can.
    let st = p.h.runtime_status().await;
    let of = |n: &str| {
        st.runtime_handlers
            .iter()
            .find(|h| h.name == n)
            .and_then(|h| h.features)
            .unwrap_or_else(|| panic!("no handler {n}: {:?}", st.runtime_handlers))
    };
    let (husk_f, shim_f) = (of("husk"), of("runc-v2"));
    assert_eq!(
        shim_f.recursive_read_only_mounts,
        husk_f.recursive_read_only_mounts
    );
    assert_eq!(shim_f.user_namespaces, husk_f.user_namespaces);

    let pc = pod_config(&p, "v2");
    let pod_id = run_under(&p.h, pc.clone(), "runc-v2").await.unwrap();
    assert_eq!(
        shim_servers(&p).len(),
        1,
        "the pod's sandbox is the shim's task"
    );

    let script = "echo started; echo to-stderr >&2; trap 'echo bye; exit 7' TERM; while true; do sleep 0.1; done";
    let web = create_start(&p.h, &pod_id, &pc, shell(&app, "web", script, &[])).await;
    assert_eq!(
        shim_servers(&p).len(),
        1,
        "the pod's containers join its shim"
    );
    let text = log_has(&p, "web", "started").await;
    log_has(&p, "web", "to-stderr").await;
    assert!(text.contains(" stdout F started"), "{text}");
    let st = container_status(&p.h, &web).await;
    assert_eq!(st.state, ContainerState::ContainerRunning as i32);

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
    // Its container's PID namespace and annotations, as containerd's CRI
    // gives them (the runc shim grouped it by the sandbox id).
    let r = exec_sync(&p.h, &web, &["/bin/sh", "-c", "cat /proc/1/cmdline"])
        .await
        .unwrap();
    assert!(
        String::from_utf8_lossy(&r.stdout).contains("/bin/sh"),
        "{r:?}"
    );
    let spec: serde_json::Value = serde_json::from_slice(
        &std::fs::read(p.h.root().join("containers").join(&web).join("config.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        spec["annotations"]["io.kubernetes.cri.sandbox-id"],
        pod_id.as_str()
    );
    assert_eq!(
        spec["annotations"]["io.kubernetes.cri.container-type"],
        "container"
    );
    assert_eq!(
        spec["annotations"]["io.kubernetes.cri.container-name"],
        "web"
    );

    // A server killed and restarted: the pod's monitor still holds its
    // shim; execs go on.
    p.h.kill9();
    p.h.restart().await;
    let r = exec_sync(&p.h, &web, &["/bin/echo", "again"])
        .await
        .unwrap();
    assert_eq!(r.stdout, b"again\n");

    // A stop: the signal reaches the payload, its exit code comes back
    // from the shim's TaskExit.
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

    // A command that exits on its own: its code, as the shim reports it.
    let quick = create_start(
        &p.h,
        &pod_id,
        &pc,
        shell(&app, "quick", "echo done; exit 3", &[]),
    )
    .await;
    let st = wait_for!(30, "quick to exit", {
        let st = container_status(&p.h, &quick).await;
        (st.state == ContainerState::ContainerExited as i32).then_some(st)
    });
    assert_eq!(st.exit_code, 3);
    log_has(&p, "quick", "done").await;
    rt.remove_container(RemoveContainerRequest {
        container_id: quick,
    })
    .await
    .unwrap();

    // The shim killed with -9, a container running: the monitor cleans its
    // tasks with the shim's `delete` and reports the container exited.
    let idle = create_start(&p.h, &pod_id, &pc, shell(&app, "idle", "sleep 3600", &[])).await;
    let shims = shim_servers(&p);
    assert_eq!(shims.len(), 1);
    // SAFETY: kill(2) of the shim this test's server started.
    unsafe { libc::kill(shims[0], libc::SIGKILL) };
    let st = wait_for!(30, "idle to be reported exited", {
        let st = container_status(&p.h, &idle).await;
        (st.state == ContainerState::ContainerExited as i32).then_some(st)
    });
    assert_eq!(st.exit_code, 137, "{st:?}");
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
    assert_eq!(shim_servers(&p), Vec::<i32>::new());
    assert_eq!(leftovers(&p), Vec::<String>::new());
    assert_eq!(v2_sockets(&p), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shim_not_there_or_refusing_its_options_is_refused_and_leaves_nothing() {
    if !common::require_root() {
        return;
    }
    let bins = tempfile::tempdir().unwrap();
    // A shim whose `start` never answers; one that answers no address.
    let hung = bins.path().join("containerd-shim-hung-v2");
    common::write_executable(&hung, "#!/bin/sh\nexec sleep 600\n");
    let babbling = bins.path().join("containerd-shim-babble-v2");
    common::write_executable(&babbling, "#!/bin/sh\necho 'no address for you'\n");
    let config = format!(
        r#"{}
[runtimes.hung]
type = "shim"
runtime_type = "io.containerd.hung.v2"
path = "{hung}"
timeout_secs = 1

[runtimes.babbling]
type = "shim"
runtime_type = "io.containerd.babble.v2"
path = "{babbling}"

[runtimes.missing]
type = "shim"
runtime_type = "io.containerd.nosuch.v2"

[runtimes.badruntime]
type = "shim"
runtime_type = "io.containerd.runc.v2"
path = "{shim}"
[runtimes.badruntime.options]
BinaryName = "/nonexistent/runc"
"#,
        handler_config(),
        shim = common::shared("shims/containerd-shim-runc-v2").display(),
        hung = hung.display(),
        babbling = babbling.display(),
    );
    let p = pod::setup_config(vec![], "/usr/lib/cni", vec![], &config).await;
    let pc = pod_config(&p, "bad");
    let e = run_under(&p.h, pc.clone(), "missing").await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(
        e.message().contains("containerd-shim-nosuch-v2"),
        "{}",
        e.message()
    );
    let e = run_under(&p.h, pc.clone(), "badruntime").await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("/nonexistent/runc"), "{}", e.message());
    assert_eq!(leftovers(&p), Vec::<String>::new());
    // A shim that hangs is killed at the handler's timeout.
    let e = run_under(&p.h, pc.clone(), "hung").await.unwrap_err();
    assert_eq!(e.code(), Code::DeadlineExceeded, "{e:?}");
    let sleeping = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&format!("sleep{}600", '\0')))
        })
        .count();
    assert_eq!(sleeping, 0, "the hung shim's process group was killed");
    assert_eq!(leftovers(&p), Vec::<String>::new());
    let e = run_under(&p.h, pc, "babbling").await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(
        e.message().contains("no address for you"),
        "{}",
        e.message()
    );
    assert_eq!(shim_servers(&p), Vec::<i32>::new());
    assert_eq!(leftovers(&p), Vec::<String>::new());
    assert_eq!(v2_sockets(&p), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn streams_updates_and_stats_go_through_the_shim() {
    use common::stream::{attach_echo, attach_tty_resized, exec_url, stdio, wait_until, TTY_ECHO};
    use husk::streaming::client::{self, Tls, Transport};
    use tokio::io::AsyncWriteExt;
    if !common::require_root() {
        return;
    }
    let p = pod::setup_config(vec![], "/usr/lib/cni", vec![], &handler_config()).await;
    let app = app_image(&p).await;
    let pc = pod_config(&p, "v2s");
    let pod_id = run_under(&p.h, pc.clone(), "runc-v2").await.unwrap();
    let mut c = shell(&app, "cat", "exec cat", &[]);
    c.stdin = true;
    c.stdin_once = true;
    let cat = create_start(&p.h, &pod_id, &pc, c).await;

    // A streaming exec reading its stdin to EOF: the shim is told when the
    // client's stdin ends (it holds the FIFO open until then).
    let url = exec_url(&p.h, &cat, &["/bin/sh", "-c", "cat; echo end"], true, false).await;
    let (stdin_r, mut stdin_w) = tokio::io::duplex(1024);
    let (io, out, _) = stdio(Some(Box::new(stdin_r)), false);
    let session = tokio::spawn(async move {
        client::remotecommand(&url, Transport::Spdy, &Tls::default(), io).await
    });
    stdin_w.write_all(b"through the fifo\n").await.unwrap();
    wait_until("the exec's echo", || {
        out.text().contains("through the fifo")
    })
    .await;
    drop(stdin_w);
    let code = tokio::time::timeout(std::time::Duration::from_secs(30), session)
        .await
        .expect("the exec ends with its stdin")
        .unwrap()
        .unwrap();
    assert_eq!(
        (code, out.text()),
        (0, "through the fifo\nend\n".to_string())
    );

    // A terminal exec: the runtime's terminal, its output on stdout.
    let url = exec_url(&p.h, &cat, &["/bin/sh", "-c", "tty; exit 4"], false, true).await;
    let (io, out, _) = stdio(None, true);
    let code = client::remotecommand(&url, Transport::WebSocket, &Tls::default(), io)
        .await
        .unwrap();
    assert_eq!(code, 4);
    assert!(out.text().contains("/dev/pts/"), "{:?}", out.text());

    // Attach to a stdin_once container: its stdin ends with the attach's,
    // and so does the container.
    let mut rt = p.h.runtime().await;
    let (code, text) = attach_echo(&mut rt, &cat, Transport::Spdy, "hello attach\n").await;
    assert_eq!(code, 0);
    assert!(text.contains("hello attach"), "{text:?}");
    let st = wait_for!(30, "cat to exit at its stdin's end", {
        let st = container_status(&p.h, &cat).await;
        (st.state == ContainerState::ContainerExited as i32).then_some(st)
    });
    assert_eq!(st.exit_code, 0);

    // Attach to a container whose terminal the runtime holds: a resize
    // goes through the shim's ResizePty.
    let mut c = ccfg(&app, "term", &["sh", "-c", TTY_ECHO], &[]);
    c.tty = true;
    c.stdin = true;
    let term = create_start(&p.h, &pod_id, &pc, c).await;
    let log = std::path::Path::new(&pc.log_directory).join("term/0.log");
    let out = attach_tty_resized(&mut rt, &term, &log, Transport::WebSocket).await;
    assert!(out.contains("got hello"), "{out:?}");

    // An update goes through the shim's Update (runc update), stats come
    // from its Stats.
    let web = create_start(&p.h, &pod_id, &pc, shell(&app, "web", "sleep 3600", &[])).await;
    rt.update_container_resources(UpdateContainerResourcesRequest {
        container_id: web.clone(),
        linux: Some(LinuxContainerResources {
            memory_limit_in_bytes: 80 << 20,
            ..Default::default()
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    let v2 = std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    let file = if v2 {
        "/sys/fs/cgroup/memory.max"
    } else {
        "/sys/fs/cgroup/memory/memory.limit_in_bytes"
    };
    let r = exec_sync(&p.h, &web, &["/bin/cat", file]).await.unwrap();
    assert_eq!(
        String::from_utf8_lossy(&r.stdout).trim(),
        (80u64 << 20).to_string()
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
    assert!(stats.cpu.unwrap().usage_core_nano_seconds.unwrap().value > 0);

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
    assert_eq!(shim_servers(&p), Vec::<i32>::new());
    assert_eq!(leftovers(&p), Vec::<String>::new());
    assert_eq!(v2_sockets(&p), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_monitor_killed_with_its_shims_tasks_running_leaves_nothing() {
    if !common::require_root() {
        return;
    }
    let p = pod::setup_config(vec![], "/usr/lib/cni", vec![], &handler_config()).await;
    let app = app_image(&p).await;
    let pc = pod_config(&p, "v2k");
    let pod_id = run_under(&p.h, pc.clone(), "runc-v2").await.unwrap();
    let idle = create_start(&p.h, &pod_id, &pc, shell(&app, "idle", "sleep 3600", &[])).await;
    // The pod's monitor (husk's shim) killed: the runtime's shim and its
    // tasks run on; the monitor that replaces it finds the task records,
    // dials the shim again and ends them there.
    let monitor = pod::shim_pid(&p.h, &pod_id);
    // SAFETY: kill(2) of the test's own monitor.
    unsafe { libc::kill(monitor as i32, libc::SIGKILL) };
    wait_for!(
        10,
        "the monitor to die",
        (!pod::alive(monitor as i32)).then_some(())
    );
    assert_eq!(shim_servers(&p).len(), 1, "the runtime's shim outlives it");
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
    wait_for!(
        10,
        "the runtime's shim to end",
        shim_servers(&p).is_empty().then_some(())
    );
    assert_eq!(leftovers(&p), Vec::<String>::new());
    assert_eq!(v2_sockets(&p), Vec::<String>::new());
}
