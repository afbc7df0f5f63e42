//! Which pods have a pause, on a real husk serve: one whose containers
//! share a PID namespace has one (that namespace's init); any other has
//! none. What a pod without one is made of, its sysctls and host name set
//! by the server, its state after a server kill and when its shim dies,
//! its teardown, and the refusals.
#![allow(clippy::unwrap_used)]

mod common;

use common::ctr::*;
use common::pod::*;
use husk::api::cri::*;
use std::path::Path;

fn pid_mode(c: &mut PodSandboxConfig, mode: NamespaceMode) {
    c.linux
        .as_mut()
        .unwrap()
        .security_context
        .get_or_insert_with(Default::default)
        .namespace_options = Some(NamespaceOption {
        pid: mode as i32,
        ..Default::default()
    });
}

fn sysctls(c: &mut PodSandboxConfig, kv: &[(&str, &str)]) {
    c.linux.as_mut().unwrap().sysctls = kv
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
}

fn proc_sys(key: &str) -> String {
    std::fs::read_to_string(Path::new("/proc/sys").join(key)).unwrap()
}

async fn exec(p: &Pod, id: &str, script: &str) -> String {
    let r =
        p.h.runtime()
            .await
            .exec_sync(ExecSyncRequest {
                container_id: id.into(),
                cmd: vec!["/bin/sh".into(), "-c".into(), script.into()],
                timeout: 10,
            })
            .await
            .unwrap()
            .into_inner();
    assert_eq!(r.exit_code, 0, "{}", String::from_utf8_lossy(&r.stderr));
    String::from_utf8_lossy(&r.stdout).into_owned()
}

fn shim_pid(p: &Pod, pod: &str) -> i32 {
    std::fs::read_to_string(p.h.dir.path().join("run/s").join(pod).join("shim.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// The children of a process (of all its threads).
fn children(pid: i32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .flat_map(|t| {
            std::fs::read_to_string(t.path().join("children"))
                .unwrap_or_default()
                .split_whitespace()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_that_shares_no_pid_namespace_has_no_pause() {
    if !common::require_root() {
        return;
    }
    let mut p = setup(vec![]).await;
    let image = app_image(&p).await;
    let mut pc = pod_config(&p, "lean");
    pid_mode(&mut pc, NamespaceMode::Container);
    sysctls(
        &mut pc,
        &[
            ("net.ipv4.ip_unprivileged_port_start", "81"),
            ("kernel.shmmni", "2048"),
        ],
    );
    let (port_start, shmmni) = (
        proc_sys("net/ipv4/ip_unprivileged_port_start"),
        proc_sys("kernel/shmmni"),
    );
    let pod = run(&p.h, pc.clone()).await.unwrap();
    let st = status(&p.h, &pod).await.unwrap();
    assert_eq!(
        st.status.as_ref().unwrap().state,
        PodSandboxState::SandboxReady as i32
    );
    assert_eq!(pause_pid(&st), 0);

    // Nothing of a pause: no runtime state, no bundle, no process under
    // the shim, no mount but the pod's /dev/shm.
    let d = p.h.dir.path();
    let sandbox = d.join("root/sandboxes").join(&pod);
    assert!(!d.join("run/s").join(&pod).join("youki").join(&pod).exists());
    assert!(!sandbox.join("bundle").exists());
    assert_eq!(
        mounts_as_pod_sees(&p.h, &pod, &sandbox),
        vec![sandbox.join("shm").display().to_string()]
    );
    let shim = shim_pid(&p, &pod);
    assert_eq!(children(shim), Vec::<String>::new());

    // A container sees the pod's sysctls and host name, and is the init of
    // its own PID namespace; the node's values are untouched.
    let c = create_start(
        &p.h,
        &pod,
        &pc,
        ccfg(&image, "app", &["/bin/sleep", "3600"], &[]),
    )
    .await;
    assert_eq!(children(shim).len(), 1, "the container's init alone");
    let seen = exec(
        &p,
        &c,
        "cat /proc/sys/net/ipv4/ip_unprivileged_port_start /proc/sys/kernel/shmmni; \
         hostname; tr '\\0' ' ' </proc/1/cmdline",
    )
    .await;
    assert_eq!(seen, "81\n2048\nlean\n/bin/sleep 3600 ");
    assert_eq!(proc_sys("net/ipv4/ip_unprivileged_port_start"), port_start);
    assert_eq!(proc_sys("kernel/shmmni"), shmmni);

    // kill -9 the server: with no pause to ask, a new server finds the pod
    // READY from its shim, and the container still running.
    p.h.restart().await;
    assert_eq!(
        status(&p.h, &pod).await.unwrap().status.unwrap().state,
        PodSandboxState::SandboxReady as i32
    );
    assert_eq!(
        container_status(&p.h, &c).await.state,
        ContainerState::ContainerRunning as i32
    );
    let shim = shim_pid(&p, &pod);

    // A container that asks to share the pod's PID namespace: there is none.
    let mut sharer = ccfg(&image, "sharer", &["/bin/sleep", "3600"], &[]);
    security(&mut sharer).namespace_options = Some(NamespaceOption {
        pid: NamespaceMode::Pod as i32,
        ..Default::default()
    });
    let e = try_create(&p.h, &pod, &pc, sharer).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("share no PID namespace"), "{e:?}");

    // Its shim killed, the pod is NOTREADY; it still goes away entirely.
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(shim).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    wait_for!(5, "the shim to die", (!alive(shim)).then_some(()));
    assert_eq!(
        status(&p.h, &pod).await.unwrap().status.unwrap().state,
        PodSandboxState::SandboxNotready as i32
    );
    stop_remove(&p.h, &c).await;
    stop_remove_pod(&p.h, &pod).await;
    assert_eq!(leftovers(&p), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn sysctls_the_kernel_refuses_are_invalid_and_unwound() {
    if !common::require_root() {
        return;
    }
    let p = setup(vec![]).await;
    let cases = [
        (
            NamespaceMode::Container,
            "net.ipv4.no_such_knob",
            "1",
            "no such sysctl",
        ),
        (
            NamespaceMode::Container,
            "kernel.shmmni",
            "many",
            "kernel.shmmni",
        ),
        (
            NamespaceMode::Pod,
            "net.ipv4.no_such_knob",
            "1",
            "no such sysctl",
        ),
    ];
    for (i, (mode, key, value, said)) in cases.into_iter().enumerate() {
        let mut c = p.config(&format!("refused-{i}"));
        pid_mode(&mut c, mode);
        sysctls(&mut c, &[(key, value)]);
        let e = run(&p.h, c).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{key}: {e:?}");
        assert!(e.message().contains(said), "{key}: {e:?}");
        assert_eq!(leftovers(&p), Vec::<String>::new(), "{key}");
    }
    assert!(list_pods(&p).await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_that_shares_its_pid_namespace_has_a_pause_as_its_init() {
    if !common::require_root() {
        return;
    }
    let p = setup(vec![]).await;
    let image = app_image(&p).await;
    let mut pc = pod_config(&p, "shared");
    pid_mode(&mut pc, NamespaceMode::Pod);
    let pod = run(&p.h, pc.clone()).await.unwrap();
    let pause = pause_pid(&status(&p.h, &pod).await.unwrap());
    assert!(pause > 0 && alive(pause));
    let mut cc = ccfg(&image, "app", &["/bin/sleep", "3600"], &[]);
    security(&mut cc).namespace_options = Some(NamespaceOption {
        pid: NamespaceMode::Pod as i32,
        ..Default::default()
    });
    let c = create_start(&p.h, &pod, &pc, cc).await;
    // PID 1 of the container's namespace is the pause image's command.
    let init = exec(&p, &c, "tr '\\0' ' ' </proc/1/cmdline").await;
    assert_eq!(init, "/bin/sleep 2147483647 ");
    stop_remove(&p.h, &c).await;
    stop_remove_pod(&p.h, &pod).await;
    assert!(!alive(pause));
    assert_eq!(leftovers(&p), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hostusers_false_pod_needs_no_pause_either() {
    if !common::require_root() {
        return;
    }
    use common::userns::*;
    let p = setup(vec![]).await;
    if let Err(why) = husk::idmap::Support::probe(&p.h.root()).root {
        eprintln!("skipped: the node cannot idmap ({why})");
        return;
    }
    let image = app_image(&p).await;
    let host = 65536 * 6;
    let u = || {
        userns(
            NamespaceMode::Pod,
            vec![map(0, host, 65536)],
            vec![map(0, host, 65536)],
        )
    };
    let mut pc = pod_config(&p, "lean-userns");
    pid_mode(&mut pc, NamespaceMode::Container);
    sysctls(&mut pc, &[("net.ipv4.ip_unprivileged_port_start", "82")]);
    let pc = with_userns(pc, u());
    let pod = run(&p.h, pc.clone()).await.unwrap();
    assert_eq!(pause_pid(&status(&p.h, &pod).await.unwrap()), 0);
    let mut c = ccfg(&image, "app", &["/bin/sleep", "3600"], &[]);
    container_userns(&mut c, u());
    security(&mut c).namespace_options.as_mut().unwrap().pid = NamespaceMode::Container as i32;
    let c = create_start(&p.h, &pod, &pc, c).await;
    let pin = as_pod_sees(
        &p.h,
        &pod,
        &p.h.dir.path().join("run/ns").join(&pod).join("user"),
    );
    let ino = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&pin).unwrap());
    let seen = exec(
        &p,
        &c,
        "cat /proc/self/uid_map /proc/sys/net/ipv4/ip_unprivileged_port_start; \
         readlink /proc/self/ns/user",
    )
    .await;
    let words: Vec<String> = seen.split_whitespace().map(str::to_string).collect();
    let want = [
        "0",
        &host.to_string(),
        "65536",
        "82",
        &format!("user:[{ino}]"),
    ];
    assert_eq!(words, want, "{seen}");
    stop_remove(&p.h, &c).await;
    stop_remove_pod(&p.h, &pod).await;
    assert_eq!(leftovers(&p), Vec::<String>::new());
}
