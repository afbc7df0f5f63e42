//! Containers in pods on a real husk serve: CRI command semantics, env,
//! users, exit codes and reasons (OOMKilled included), the CRI log format
//! with partial lines, stop with a grace period, and clean removal.
#![allow(clippy::unwrap_used)]

mod common;

use common::ctr::{ccfg, container_status as status_of, create_start, pod_config, wait_exited};
use common::images::*;
use common::pod::*;
use husk::api::cri::*;
use std::time::{Duration, Instant};

async fn app_image(p: &Pod) -> String {
    let img = common::images::Image::with_config(
        vec![Layer::new(&busybox_entries(), Compression::Gzip)],
        "amd64",
        serde_json::json!({"Entrypoint": ["/bin/sh", "-c"], "Cmd": ["echo image-default"], "Env": ["PATH=/bin", "FROM_IMAGE=1", "OVERRIDE=image"], "WorkingDir": "/tmp"}),
    );
    Pusher::new(&p.reg)
        .image("app/busybox", "v1", &img, Format::Oci)
        .await;
    let r = format!("{}/app/busybox:v1", p.reg.host());
    p.h.pull(&r).await.unwrap();
    r
}

fn log_lines(pc: &PodSandboxConfig, name: &str) -> Vec<(String, String, String)> {
    let text = std::fs::read_to_string(
        std::path::Path::new(&pc.log_directory)
            .join(name)
            .join("0.log"),
    )
    .unwrap_or_default();
    text.lines()
        .map(|l| {
            let mut it = l.splitn(4, ' ');
            let ts = it.next().unwrap();
            assert!(ts.ends_with('Z') && ts.contains('T'), "timestamp {ts}");
            (
                it.next().unwrap().to_string(),
                it.next().unwrap().to_string(),
                it.next().unwrap_or("").to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn run_exit_codes_env_users_logs_and_cleanup() {
    if !common::require_root() {
        return;
    }
    let p = setup(vec![]).await;
    let image = app_image(&p).await;
    let pc = pod_config(&p, "apps");
    let pod = run(&p.h, pc.clone()).await.unwrap();

    // Image Entrypoint + Cmd, env from image and config, cwd from the image.
    let mut c = ccfg(&image, "defaults", &[], &[]);
    c.envs = vec![KeyValue {
        key: "OVERRIDE".into(),
        value: "config".into(),
    }];
    let id = create_start(&p.h, &pod, &pc, c).await;
    let st = wait_exited(&p.h, &id).await;
    assert_eq!((st.exit_code, st.reason.as_str()), (0, "Completed"));
    assert!(
        st.started_at >= st.created_at
            && st.finished_at >= st.started_at
            && st.created_at > 1_600_000_000_000_000_000
    );
    assert_eq!(
        log_lines(&pc, "defaults"),
        vec![("stdout".into(), "F".into(), "image-default".into())]
    );

    // args replace Cmd (Entrypoint kept); stdout and stderr; exit code.
    let script = "echo out; echo err >&2; echo cwd=$(pwd) env=$FROM_IMAGE,$OVERRIDE,$EXTRA; exit 3";
    let mut c = ccfg(&image, "args", &[], &[script]);
    c.envs = vec![
        KeyValue {
            key: "OVERRIDE".into(),
            value: "config".into(),
        },
        KeyValue {
            key: "EXTRA".into(),
            value: "x".into(),
        },
    ];
    let id = create_start(&p.h, &pod, &pc, c).await;
    let st = wait_exited(&p.h, &id).await;
    assert_eq!((st.exit_code, st.reason.as_str()), (3, "Error"));
    let lines = log_lines(&pc, "args");
    assert!(
        lines.contains(&("stdout".into(), "F".into(), "out".into())),
        "{lines:?}"
    );
    assert!(
        lines.contains(&("stderr".into(), "F".into(), "err".into())),
        "{lines:?}"
    );
    assert!(
        lines.contains(&(
            "stdout".into(),
            "F".into(),
            "cwd=/tmp env=1,config,x".into()
        )),
        "{lines:?}"
    );

    // command replaces Entrypoint and drops Cmd; run_as_user/group; a long line is split.
    let mut c = ccfg(
        &image,
        "user",
        &[
            "/bin/sh",
            "-c",
            "id -u; id -g; head -c 20000 /dev/zero | tr '\\0' a; echo",
        ],
        &[],
    );
    let sc = c.linux.as_mut().unwrap().security_context.as_mut().unwrap();
    sc.run_as_user = Some(Int64Value { value: 65534 });
    sc.run_as_group = Some(Int64Value { value: 65534 });
    let id = create_start(&p.h, &pod, &pc, c).await;
    assert_eq!(wait_exited(&p.h, &id).await.exit_code, 0);
    let lines = log_lines(&pc, "user");
    assert_eq!(lines[0].2, "65534");
    assert_eq!(lines[1].2, "65534");
    assert_eq!(
        (lines[2].1.as_str(), lines[2].2.len()),
        ("P", 16 * 1024),
        "a 20 000-byte line starts with a 16 KiB partial"
    );
    assert_eq!(
        (lines[3].1.as_str(), lines[3].2.len()),
        ("F", 20_000 - 16 * 1024)
    );

    // A read-only rootfs refuses writes.
    let mut c = ccfg(&image, "ro", &["/bin/sh", "-c", "touch /newfile"], &[]);
    c.linux
        .as_mut()
        .unwrap()
        .security_context
        .as_mut()
        .unwrap()
        .readonly_rootfs = true;
    let id = create_start(&p.h, &pod, &pc, c).await;
    assert_ne!(wait_exited(&p.h, &id).await.exit_code, 0);

    // A memory limit is enforced: OOMKilled.
    let mut c = ccfg(
        &image,
        "oom",
        &[
            "/bin/sh",
            "-c",
            // The container sees its own cgroup (read-only) at /sys/fs/cgroup.
            "test \"$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes)\" = 33554432 || exit 9; \
             test -f /sys/fs/cgroup/cpu/cpu.shares -a -f /sys/fs/cgroup/cpuacct/cpuacct.usage || exit 8; \
             touch /sys/fs/cgroup/x 2>/dev/null && exit 7; \
             mkdir /sys/fs/cgroup/memory/sub 2>/dev/null && exit 6; \
             dd if=/dev/zero of=/dev/null bs=128M count=1",
        ],
        &[],
    );
    c.linux.as_mut().unwrap().resources = Some(LinuxContainerResources {
        memory_limit_in_bytes: 32 << 20,
        ..Default::default()
    });
    let id = create_start(&p.h, &pod, &pc, c).await;
    let st = wait_exited(&p.h, &id).await;
    assert_eq!((st.exit_code, st.reason.as_str()), (137, "OOMKilled"));
    let limit = st
        .resources
        .and_then(|r| r.linux)
        .map(|l| l.memory_limit_in_bytes);
    assert_eq!(limit, Some(32 << 20), "status reports the resources");

    // StopContainer: SIGTERM ignored by a PID 1 without a handler, SIGKILL after the timeout.
    let id = create_start(
        &p.h,
        &pod,
        &pc,
        ccfg(&image, "sleeper", &["/bin/sleep", "1000"], &[]),
    )
    .await;
    let mut rt = p.h.runtime().await;
    let listed = rt
        .list_containers(ListContainersRequest {
            filter: Some(ContainerFilter {
                state: Some(ContainerStateValue {
                    state: ContainerState::ContainerRunning as i32,
                }),
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .into_inner()
        .containers;
    assert_eq!(
        listed.iter().map(|c| c.id.clone()).collect::<Vec<_>>(),
        vec![id.clone()]
    );
    let t = Instant::now();
    rt.stop_container(StopContainerRequest {
        container_id: id.clone(),
        timeout: 1,
    })
    .await
    .unwrap();
    assert!(
        t.elapsed() >= Duration::from_millis(900),
        "waited for the grace period"
    );
    let st = wait_exited(&p.h, &id).await;
    assert_eq!(st.exit_code, 137);
    rt.stop_container(StopContainerRequest {
        container_id: id.clone(),
        timeout: 1,
    })
    .await
    .unwrap();
    rt.stop_container(StopContainerRequest {
        container_id: "unknown".into(),
        timeout: 1,
    })
    .await
    .unwrap();

    // A second StopContainer with a shorter timeout brings the first
    // one's SIGKILL forward (the kubelet's shortened grace period).
    let slow = create_start(
        &p.h,
        &pod,
        &pc,
        ccfg(&image, "slow", &["/bin/sleep", "1000"], &[]),
    )
    .await;
    let mut first_rt = p.h.runtime().await;
    let first_id = slow.clone();
    let t = Instant::now();
    let first = tokio::spawn(async move {
        first_rt
            .stop_container(StopContainerRequest {
                container_id: first_id,
                timeout: 120,
            })
            .await
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    rt.stop_container(StopContainerRequest {
        container_id: slow.clone(),
        timeout: 1,
    })
    .await
    .unwrap();
    first.await.unwrap().unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(15),
        "took {:?}",
        t.elapsed()
    );
    assert_eq!(wait_exited(&p.h, &slow).await.exit_code, 137);
    rt.remove_container(RemoveContainerRequest { container_id: slow })
        .await
        .unwrap();

    // Remove: idempotent, unknown is success, then NotFound.
    rt.remove_container(RemoveContainerRequest {
        container_id: id.clone(),
    })
    .await
    .unwrap();
    rt.remove_container(RemoveContainerRequest {
        container_id: id.clone(),
    })
    .await
    .unwrap();
    assert_eq!(
        rt.container_status(ContainerStatusRequest {
            container_id: id,
            verbose: false
        })
        .await
        .unwrap_err()
        .code(),
        tonic::Code::NotFound
    );

    // A running container goes with its pod; nothing is left.
    create_start(
        &p.h,
        &pod,
        &pc,
        ccfg(&image, "left-running", &["/bin/sleep", "1000"], &[]),
    )
    .await;
    rt.stop_pod_sandbox(StopPodSandboxRequest {
        pod_sandbox_id: pod.clone(),
    })
    .await
    .unwrap();
    rt.remove_pod_sandbox(RemovePodSandboxRequest {
        pod_sandbox_id: pod,
    })
    .await
    .unwrap();
    assert!(rt
        .list_containers(ListContainersRequest::default())
        .await
        .unwrap()
        .into_inner()
        .containers
        .is_empty());
    assert_eq!(leftovers(&p), Vec::<String>::new());
    assert_eq!(
        std::fs::read_dir(p.h.root().join("containers"))
            .unwrap()
            .count(),
        0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn localhost_mounts_capabilities_privileged_and_log_reopen() {
    if !common::require_root() {
        return;
    }
    let p = setup(vec![]).await;
    let image = app_image(&p).await;
    let pc = pod_config(&p, "pair");
    let pod = run(&p.h, pc.clone()).await.unwrap();

    // Two containers of one pod talk over localhost.
    let server = ccfg(&image, "server", &["/bin/sh", "-c", "mkdir -p /tmp/www && echo from-the-neighbour > /tmp/www/index.html && exec /bin/httpd -f -p 127.0.0.1:8080 -h /tmp/www"], &[]);
    create_start(&p.h, &pod, &pc, server).await;
    let client = ccfg(&image, "client", &["/bin/sh", "-c", "for i in 1 2 3 4 5 6 7 8 9 10; do timeout 2 wget -q -O - http://127.0.0.1:8080/index.html && exit 0; sleep 0.2; done; exit 1"], &[]);
    let id = create_start(&p.h, &pod, &pc, client).await;
    assert_eq!(wait_exited(&p.h, &id).await.exit_code, 0);
    assert!(log_lines(&pc, "client")
        .iter()
        .any(|l| l.2 == "from-the-neighbour"));

    // A read-only bind mount: readable, not writable; the host is untouched.
    let web = p.h.dir.path().join("web");
    std::fs::create_dir_all(&web).unwrap();
    std::fs::write(web.join("index.html"), "mounted").unwrap();
    let mut c = ccfg(
        &image,
        "mount",
        &[
            "/bin/sh",
            "-c",
            "cat /www/index.html; touch /www/x && exit 10; exit 0",
        ],
        &[],
    );
    c.mounts = vec![Mount {
        container_path: "/www".into(),
        host_path: web.display().to_string(),
        readonly: true,
        // Propagation needs a shared or slave host mount (tests/cri_semantics.rs);
        // this host's / is private.
        propagation: MountPropagation::PropagationPrivate as i32,
        ..Default::default()
    }];
    let id = create_start(&p.h, &pod, &pc, c).await;
    assert_eq!(wait_exited(&p.h, &id).await.exit_code, 0);
    assert!(log_lines(&pc, "mount").iter().any(|l| l.2 == "mounted"));
    let st = status_of(&p.h, &id).await;
    assert_eq!(
        st.mounts
            .iter()
            .map(|m| m.container_path.as_str())
            .collect::<Vec<_>>(),
        vec!["/www"],
        "status lists the mounts"
    );

    // A device from the config is created and allowed.
    let mut c = ccfg(
        &image,
        "device",
        &["/bin/sh", "-c", "echo hi > /dev/mynull"],
        &[],
    );
    c.devices = vec![Device {
        container_path: "/dev/mynull".into(),
        host_path: "/dev/null".into(),
        permissions: "rwm".into(),
    }];
    let id = create_start(&p.h, &pod, &pc, c).await;
    assert_eq!(
        wait_exited(&p.h, &id).await.exit_code,
        0,
        "the mapped device is writable"
    );
    assert!(!web.join("x").exists());

    // A missing host path is created as an empty directory.
    let missing = p.h.dir.path().join("created-by-husk");
    let mut c = ccfg(&image, "missing", &["/bin/sh", "-c", "echo hi > /m/f"], &[]);
    c.mounts = vec![Mount {
        container_path: "/m".into(),
        host_path: missing.display().to_string(),
        ..Default::default()
    }];
    let id = create_start(&p.h, &pod, &pc, c).await;
    assert_eq!(wait_exited(&p.h, &id).await.exit_code, 0);
    assert_eq!(std::fs::read_to_string(missing.join("f")).unwrap(), "hi\n");

    // A dropped capability denies (and is really there when kept).
    let script = "touch /tmp/f && chown 1:1 /tmp/f";
    let mut c = ccfg(&image, "nochown", &["/bin/sh", "-c", script], &[]);
    c.linux
        .as_mut()
        .unwrap()
        .security_context
        .as_mut()
        .unwrap()
        .capabilities = Some(Capability {
        drop_capabilities: vec!["CHOWN".into()],
        ..Default::default()
    });
    let id = create_start(&p.h, &pod, &pc, c).await;
    assert_ne!(
        wait_exited(&p.h, &id).await.exit_code,
        0,
        "chown denied without CAP_CHOWN"
    );
    let id = create_start(
        &p.h,
        &pod,
        &pc,
        ccfg(&image, "chown", &["/bin/sh", "-c", script], &[]),
    )
    .await;
    assert_eq!(
        wait_exited(&p.h, &id).await.exit_code,
        0,
        "chown allowed with the default set"
    );

    // Privileged: every capability (mounting a tmpfs needs CAP_SYS_ADMIN).
    let mut c = ccfg(
        &image,
        "priv",
        &[
            "/bin/sh",
            "-c",
            "mkdir -p /tmp/m && mount -t tmpfs none /tmp/m",
        ],
        &[],
    );
    c.linux
        .as_mut()
        .unwrap()
        .security_context
        .as_mut()
        .unwrap()
        .privileged = true;
    let id = create_start(&p.h, &pod, &pc, c).await;
    assert_eq!(wait_exited(&p.h, &id).await.exit_code, 0);
    let c = ccfg(
        &image,
        "unpriv",
        &[
            "/bin/sh",
            "-c",
            "mkdir -p /tmp/m && mount -t tmpfs none /tmp/m",
        ],
        &[],
    );
    let id = create_start(&p.h, &pod, &pc, c).await;
    assert_ne!(wait_exited(&p.h, &id).await.exit_code, 0);

    // Seccomp. RuntimeDefault is an allowlist: unshare(2) is not on it
    // without CAP_SYS_ADMIN (a user namespace needs no capability, so only
    // the filter refuses it); with CAP_SYS_ADMIN it allows mount(2), as
    // containerd's does. Unconfined allows both.
    for (name, profile, add, script, want_ok) in [
        (
            "sc-default",
            security_profile::ProfileType::RuntimeDefault,
            None,
            // Forking still works (clone without namespace flags).
            "test \"$(echo forked | cat)\" = forked && ! unshare -U true",
            true,
        ),
        (
            "sc-unconfined",
            security_profile::ProfileType::Unconfined,
            None,
            "unshare -U true",
            true,
        ),
        (
            "sc-default-admin",
            security_profile::ProfileType::RuntimeDefault,
            Some("SYS_ADMIN"),
            "mkdir -p /tmp/m && mount -t tmpfs none /tmp/m && unshare -U true",
            true,
        ),
    ] {
        let mut c = ccfg(&image, name, &["/bin/sh", "-c", script], &[]);
        let sc = c.linux.as_mut().unwrap().security_context.as_mut().unwrap();
        sc.capabilities = add.map(|a| Capability {
            add_capabilities: vec![a.into()],
            ..Default::default()
        });
        sc.seccomp = Some(SecurityProfile {
            profile_type: profile as i32,
            localhost_ref: String::new(),
        });
        let id = create_start(&p.h, &pod, &pc, c).await;
        let exit = wait_exited(&p.h, &id).await.exit_code;
        assert_eq!(
            exit == 0,
            want_ok,
            "{name}: exit {exit}, log {:?}",
            log_lines(&pc, name)
        );
    }

    // AppArmor on a kernel without it: the request is ignored with a
    // warning naming the container, and the container runs.
    if !std::path::Path::new("/sys/module/apparmor").exists() {
        let mut c = ccfg(&image, "apparmor", &["/bin/true"], &[]);
        let sc = c.linux.as_mut().unwrap().security_context.as_mut().unwrap();
        sc.apparmor = Some(SecurityProfile {
            profile_type: security_profile::ProfileType::Localhost as i32,
            localhost_ref: "k8s-apparmor-example".into(),
        });
        let id = create_start(&p.h, &pod, &pc, c).await;
        assert_eq!(wait_exited(&p.h, &id).await.exit_code, 0);
        let log = p.h.log();
        assert!(
            log.lines()
                .any(|l| l.contains("AppArmor") && l.contains(&id)),
            "no AppArmor warning for {id} in:\n{log}"
        );
    }

    // ReopenContainerLog after a rotation: no line lost.
    let id = create_start(
        &p.h,
        &pod,
        &pc,
        ccfg(
            &image,
            "talker",
            &[
                "/bin/sh",
                "-c",
                "i=0; while true; do i=$((i+1)); echo line$i; sleep 0.01; done",
            ],
            &[],
        ),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let log = std::path::Path::new(&pc.log_directory).join("talker/0.log");
    std::fs::rename(&log, log.with_extension("log.1")).unwrap();
    p.h.runtime()
        .await
        .reopen_container_log(ReopenContainerLogRequest {
            container_id: id.clone(),
        })
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    p.h.runtime()
        .await
        .stop_container(StopContainerRequest {
            container_id: id,
            timeout: 0,
        })
        .await
        .unwrap();
    let mut all: Vec<u64> = Vec::new();
    for f in [log.with_extension("log.1"), log.clone()] {
        for l in std::fs::read_to_string(&f).unwrap().lines() {
            if let Some(n) = l
                .rsplit(' ')
                .next()
                .and_then(|t| t.strip_prefix("line"))
                .and_then(|n| n.parse().ok())
            {
                all.push(n);
            }
        }
    }
    assert!(
        all.len() > 10 && std::fs::metadata(&log).unwrap().len() > 0,
        "both files have lines"
    );
    assert!(
        all.windows(2).all(|w| w[1] == w[0] + 1),
        "no line lost or duplicated across the reopen"
    );

    let mut rt = p.h.runtime().await;
    rt.remove_pod_sandbox(RemovePodSandboxRequest {
        pod_sandbox_id: pod,
    })
    .await
    .unwrap();
    assert_eq!(leftovers(&p), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn exec_sync_output_exit_code_timeout_and_no_zombies() {
    if !common::require_root() {
        return;
    }
    let p = setup(vec![]).await;
    let image = app_image(&p).await;
    let pc = pod_config(&p, "exec");
    let pod = run(&p.h, pc.clone()).await.unwrap();
    let mut c = ccfg(&image, "target", &["/bin/sleep", "1000"], &[]);
    c.envs = vec![KeyValue {
        key: "FOO".into(),
        value: "bar".into(),
    }];
    c.linux
        .as_mut()
        .unwrap()
        .security_context
        .as_mut()
        .unwrap()
        .run_as_user = Some(Int64Value { value: 65534 });
    let id = create_start(&p.h, &pod, &pc, c).await;
    let mut rt = p.h.runtime().await;
    let exec = |cmd: &[&str], timeout: i64| ExecSyncRequest {
        container_id: id.clone(),
        cmd: cmd.iter().map(|s| s.to_string()).collect(),
        timeout,
    };

    // The container's user and env; stdout, stderr and the exit code.
    let r = rt
        .exec_sync(exec(
            &["/bin/sh", "-c", "id -u; echo $FOO; echo oops >&2; exit 4"],
            10,
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(String::from_utf8_lossy(&r.stdout), "65534\nbar\n");
    assert_eq!(String::from_utf8_lossy(&r.stderr), "oops\n");
    assert_eq!(r.exit_code, 4);

    // A timeout kills the command and answers DeadlineExceeded.
    let t = Instant::now();
    let e = rt
        .exec_sync(exec(&["/bin/sleep", "30"], 1))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::DeadlineExceeded, "{e:?}");
    assert!(t.elapsed() < Duration::from_secs(10));

    // Output over a megabyte (exec probes and `kubectl exec` without a tty
    // go through ExecSync) comes back whole.
    let r = rt
        .exec_sync(exec(
            &[
                "/bin/sh",
                "-c",
                "dd if=/dev/zero bs=1048576 count=3 2>/dev/null",
            ],
            20,
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((r.exit_code, r.stdout.len()), (0, 3 << 20));

    // Past 16 MiB a stream is cut, and the cut is marked; the shim does
    // not grow past its bound, and exec leaves no file behind.
    let shim_dir = p.h.dir.path().join("run/s").join(&pod);
    let files_before = common::count_files(&shim_dir);
    let r = rt
        .exec_sync(exec(
            &[
                "/bin/sh",
                "-c",
                "dd if=/dev/zero bs=1048576 count=20 2>/dev/null; echo done >&2",
            ],
            30,
        ))
        .await
        .unwrap()
        .into_inner();
    let mark = b"\n[husk: output truncated at 16 MiB]\n";
    assert_eq!(r.stdout.len(), (16 << 20) + mark.len());
    assert!(r.stdout.ends_with(mark));
    assert_eq!(r.stderr, b"done\n", "the other stream is whole");
    assert_eq!(common::count_files(&shim_dir), files_before);
    let shim_pid = std::fs::read_to_string(shim_dir.join("shim.pid")).unwrap();
    let status = std::fs::read_to_string(format!("/proc/{}/status", shim_pid.trim())).unwrap();
    let hwm_kb: u64 = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap()
        .parse()
        .unwrap();
    // 16 MiB kept, one 64 KiB read buffer, the encoded answer: well under 96 MiB.
    assert!(hwm_kb < 96 * 1024, "shim peak RSS {hwm_kb} kB");

    // A missing binary fails clearly; an unknown container is NotFound.
    assert!(rt.exec_sync(exec(&["/no/such/binary"], 5)).await.is_err());
    let e = rt
        .exec_sync(ExecSyncRequest {
            container_id: "nope".into(),
            cmd: vec!["true".into()],
            timeout: 1,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);

    // The shim reaped everything: no zombie children.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let shim = std::fs::read_to_string(p.h.dir.path().join("run/s").join(&pod).join("shim.pid"))
        .unwrap()
        .trim()
        .to_string();
    let zombies = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter(|s| {
            let rest = s.rsplit_once(')').map(|x| x.1).unwrap_or("");
            let f: Vec<&str> = rest.split_whitespace().collect();
            f.first() == Some(&"Z") && f.get(1) == Some(&shim.as_str())
        })
        .count();
    assert_eq!(zombies, 0, "zombie children of the shim");

    rt.remove_pod_sandbox(RemovePodSandboxRequest {
        pod_sandbox_id: pod,
    })
    .await
    .unwrap();
    assert_eq!(leftovers(&p), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn containers_survive_a_server_kill_and_a_killed_shim() {
    if !common::require_root() {
        return;
    }
    let mut p = setup(vec![]).await;
    let image = app_image(&p).await;
    let pc = pod_config(&p, "recover");
    let pod = run(&p.h, pc.clone()).await.unwrap();
    let long = create_start(
        &p.h,
        &pod,
        &pc,
        ccfg(
            &image,
            "long",
            &[
                "/bin/sh",
                "-c",
                "i=0; while true; do i=$((i+1)); echo tick$i; sleep 0.05; done",
            ],
            &[],
        ),
    )
    .await;
    let short = create_start(
        &p.h,
        &pod,
        &pc,
        ccfg(&image, "short", &["/bin/sh", "-c", "sleep 1; exit 7"], &[]),
    )
    .await;

    // kill -9 the server; `short` exits while it is down.
    p.h.kill9();
    let before = log_lines(&pc, "long").len();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        log_lines(&pc, "long").len() > before,
        "the container keeps logging without the server"
    );
    let t = Instant::now();
    p.h.spawn().await;
    let list =
        p.h.runtime()
            .await
            .list_containers(ListContainersRequest::default())
            .await
            .unwrap()
            .into_inner()
            .containers;
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "listed soon after restart"
    );
    let state = |id: &str| list.iter().find(|c| c.id == id).map(|c| c.state).unwrap();
    assert_eq!(state(&long), ContainerState::ContainerRunning as i32);
    assert_eq!(state(&short), ContainerState::ContainerExited as i32);
    let st = wait_exited(&p.h, &short).await;
    assert_eq!(
        (st.exit_code, st.reason.as_str()),
        (7, "Error"),
        "the real exit code, recorded while husk was down"
    );
    assert!(st.finished_at > st.started_at);

    // kill -9 the pod's shim: its running container is reported honestly.
    let shim: i32 =
        std::fs::read_to_string(p.h.dir.path().join("run/s").join(&pod).join("shim.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(shim).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let st = status_of(&p.h, &long).await;
    assert_eq!(st.state, ContainerState::ContainerUnknown as i32, "{st:?}");
    assert!(!st.message.is_empty());

    // It can still be stopped and removed, and then nothing is left.
    let mut rt = p.h.runtime().await;
    rt.remove_container(RemoveContainerRequest {
        container_id: long.clone(),
    })
    .await
    .unwrap();
    rt.remove_pod_sandbox(RemovePodSandboxRequest {
        pod_sandbox_id: pod,
    })
    .await
    .unwrap();
    let before = log_lines(&pc, "long").len();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        log_lines(&pc, "long").len(),
        before,
        "the container is gone (no more log lines)"
    );
    assert_eq!(leftovers(&p), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn fifty_pods_are_recovered_after_a_server_kill() {
    if !common::require_root() {
        return;
    }
    let mut p = setup(vec![]).await;
    let image = app_image(&p).await;
    let mut pods = Vec::new();
    for i in 0..50 {
        let pc = pod_config(&p, &format!("many-{i}"));
        let pod = run(&p.h, pc.clone()).await.unwrap();
        let id = create_start(
            &p.h,
            &pod,
            &pc,
            ccfg(&image, "app", &["/bin/sleep", "3600"], &[]),
        )
        .await;
        pods.push((pod, id));
    }
    p.h.kill9();
    let t = Instant::now();
    p.h.spawn().await;
    let mut rt = p.h.runtime().await;
    let sandboxes = rt
        .list_pod_sandbox(ListPodSandboxRequest::default())
        .await
        .unwrap()
        .into_inner()
        .items;
    let containers = rt
        .list_containers(ListContainersRequest::default())
        .await
        .unwrap()
        .into_inner()
        .containers;
    let took = t.elapsed();
    assert_eq!(sandboxes.len(), 50);
    assert!(sandboxes
        .iter()
        .all(|s| s.state == PodSandboxState::SandboxReady as i32));
    assert_eq!(containers.len(), 50);
    assert!(containers
        .iter()
        .all(|c| c.state == ContainerState::ContainerRunning as i32));
    // How long it took is a benchmark figure, not an assertion (the
    // machines are shared and noisy); it is printed for the record.
    eprintln!("recovery: restart to a full, correct listing of 50 pods took {took:?}");
    for (pod, _) in &pods {
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
    }
    assert_eq!(leftovers(&p), Vec::<String>::new());
}
