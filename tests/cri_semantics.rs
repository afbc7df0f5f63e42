//! CRI semantics the real clients (critest, the kubelet) taught: each test
//! pins one behaviour that husk got wrong against them.
//!
//! - A pod without a hostname gets the node's; a bad or over-long hostname
//!   is InvalidArgument.
//! - RunAsGroup without RunAsUser is InvalidArgument, for pods and
//!   containers.
//! - Hugepage limits for a controller the host lacks (hugetlb here) are
//!   skipped, and the container runs, as under runc.
//! - An empty SecurityProfile is RuntimeDefault (seccomp mode 2); a
//!   Localhost profile in the Docker form blocks what it names.
//! - `rshared` mounts propagate both ways, `rslave` host to container only.
//! - ContainerStatus carries image_id and the first process's user;
//!   SupplementalGroupsPolicy Strict keeps the image's groups out;
//!   recursive read-only mounts reach submounts and are checked.
#![allow(clippy::unwrap_used)]

mod common;

use common::ctr::{app_image, ccfg, create, create_start, pod_config, security, stop_remove_pod};
use common::pod::*;
use husk::api::cri::*;

async fn exec(h: &common::server::Husk, id: &str, cmd: &[&str]) -> (i32, String) {
    let r = common::ctr::exec_sync(h, id, cmd).await.unwrap();
    (
        r.exit_code,
        String::from_utf8_lossy(&r.stdout).into_owned() + &String::from_utf8_lossy(&r.stderr),
    )
}

/// CreateContainer that must fail: its status.
async fn create_err(
    h: &common::server::Husk,
    pod: &str,
    pc: &PodSandboxConfig,
    c: ContainerConfig,
) -> tonic::Status {
    common::ctr::try_create(h, pod, pc, c).await.unwrap_err()
}

#[tokio::test(flavor = "multi_thread")]
async fn hostnames_and_run_as_group() {
    if !common::require_root() {
        return;
    }
    let p = setup(vec![]).await;
    let image = app_image(&p).await;

    // No hostname: the node's, in the UTS namespace and /etc/hostname.
    let mut pc = pod_config(&p, "nohost");
    pc.hostname.clear();
    let pod = run(&p.h, pc.clone()).await.unwrap();
    let id = create_start(
        &p.h,
        &pod,
        &pc,
        ccfg(&image, "c", &["/bin/sleep", "600"], &[]),
    )
    .await;
    let node = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    assert_eq!(
        exec(&p.h, &id, &["hostname"]).await,
        (0, format!("{node}\n"))
    );
    assert_eq!(
        exec(&p.h, &id, &["cat", "/etc/hostname"]).await,
        (0, format!("{node}\n"))
    );

    // RunAsGroup without a user, on a container.
    let mut c = ccfg(&image, "grp", &["/bin/sleep", "600"], &[]);
    security(&mut c).run_as_group = Some(Int64Value { value: 1000 });
    let e = create_err(&p.h, &pod, &pc, c).await;
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("run_as_group"), "{e:?}");
    stop_remove_pod(&p.h, &pod).await;

    // Hostnames the kernel or resolvers would refuse, and RunAsGroup
    // without a user on a pod: refused before anything is made.
    let long = "h".repeat(64);
    for bad in [long.as_str(), "under_score", "-lead"] {
        let mut pc = pod_config(&p, "badhost");
        pc.hostname = bad.into();
        let e = run(&p.h, pc).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{bad}: {e:?}");
        assert!(e.message().contains("hostname"), "{e:?}");
    }
    let mut pc = pod_config(&p, "grp-pod");
    pc.linux.as_mut().unwrap().security_context = Some(LinuxSandboxSecurityContext {
        run_as_group: Some(Int64Value { value: 5 }),
        ..Default::default()
    });
    let e = run(&p.h, pc).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(leftovers(&p).is_empty(), "{:?}", leftovers(&p));
}

#[tokio::test(flavor = "multi_thread")]
async fn hugepage_limits_without_hugetlb_and_seccomp_profiles() {
    if !common::require_root() {
        return;
    }
    let p = setup(vec![]).await;
    let image = app_image(&p).await;
    let pc = pod_config(&p, "limits");
    let pod = run(&p.h, pc.clone()).await.unwrap();

    // What the kubelet sends on every node: a hugepage limit per page size.
    let mut c = ccfg(&image, "huge", &["/bin/sleep", "600"], &[]);
    c.linux.as_mut().unwrap().resources = Some(LinuxContainerResources {
        cpu_shares: 2,
        memory_limit_in_bytes: 64 << 20,
        hugepage_limits: vec![HugepageLimit {
            page_size: "2MB".into(),
            limit: 0,
        }],
        ..Default::default()
    });
    let huge = create_start(&p.h, &pod, &pc, c).await;
    assert_eq!(exec(&p.h, &huge, &["true"]).await.0, 0);
    let hugetlb = husk::cgroup::Layout::host().has("hugetlb");
    if !hugetlb {
        assert!(
            p.h.log()
                .contains("hugetlb cgroup controller is not available"),
            "the skip is logged"
        );
    }

    // An empty profile is RuntimeDefault (the enum's zero), not unconfined.
    let mut c = ccfg(&image, "default", &["/bin/sleep", "600"], &[]);
    security(&mut c).seccomp = Some(SecurityProfile::default());
    let id = create_start(&p.h, &pod, &pc, c).await;
    let (_, out) = exec(&p.h, &id, &["grep", "Seccomp:", "/proc/self/status"]).await;
    assert!(out.contains('2'), "{out}");

    // No profile at all: unconfined.
    let id = create_start(
        &p.h,
        &pod,
        &pc,
        ccfg(&image, "none", &["/bin/sleep", "600"], &[]),
    )
    .await;
    let (_, out) = exec(&p.h, &id, &["grep", "Seccomp:", "/proc/self/status"]).await;
    assert!(out.contains('0'), "{out}");

    // A Localhost profile as critest writes it (Docker form, no errnoRet).
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("block-chmod.json");
    std::fs::write(
        &profile,
        r#"{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["chmod", "fchmodat", "fchmodat2"], "action": "SCMP_ACT_ERRNO"}]}"#,
    )
    .unwrap();
    let mut c = ccfg(&image, "local", &["/bin/sleep", "600"], &[]);
    security(&mut c).seccomp = Some(SecurityProfile {
        profile_type: security_profile::ProfileType::Localhost as i32,
        localhost_ref: profile.display().to_string(),
    });
    let id = create_start(&p.h, &pod, &pc, c).await;
    let (code, out) = exec(&p.h, &id, &["chmod", "400", "/"]).await;
    assert_ne!(code, 0);
    assert!(out.contains("Operation not permitted"), "{out}");

    // A profile that blocks sethostname, with CAP_SYS_ADMIN granted.
    let block = dir.path().join("block-hostname.json");
    std::fs::write(
        &block,
        r#"{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["sethostname"], "action": "SCMP_ACT_ERRNO"}]}"#,
    )
    .unwrap();
    let mut c = ccfg(&image, "nohostname", &["/bin/sleep", "600"], &[]);
    let sc = security(&mut c);
    sc.capabilities = Some(Capability {
        add_capabilities: vec!["SYS_ADMIN".into()],
        ..Default::default()
    });
    sc.seccomp = Some(SecurityProfile {
        profile_type: security_profile::ProfileType::Localhost as i32,
        localhost_ref: block.display().to_string(),
    });
    let id = create_start(&p.h, &pod, &pc, c).await;
    let (code, _) = exec(&p.h, &id, &["hostname", "blocked"]).await;
    assert_ne!(code, 0, "sethostname is blocked by the profile");
    stop_remove_pod(&p.h, &pod).await;
    assert!(leftovers(&p).is_empty(), "{:?}", leftovers(&p));
}

/// Runs `f` and undoes the test mounts whatever happens.
struct Unmount(Vec<std::path::PathBuf>);
impl Drop for Unmount {
    fn drop(&mut self) {
        for m in self.0.iter().rev() {
            let _ = rustix::mount::unmount(m, rustix::mount::UnmountFlags::DETACH);
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn mount_propagation_both_ways() {
    if !common::require_root() {
        return;
    }
    // Where the pods' mounts live is named: the node's namespace here.
    propagation_both_ways(vec!["--mount-namespace".into(), "node".into()]).await;
}

/// The same from a pod whose mounts live in its monitor's own namespace:
/// the volumes are mounted after the monitor started, on a node whose
/// root is not shared, so each reaches the pod as a bind staged for it.
#[tokio::test(flavor = "multi_thread")]
async fn mount_propagation_both_ways_from_the_pods_own_namespace() {
    if !common::require_root() {
        return;
    }
    propagation_both_ways(vec!["--mount-namespace".into(), "pod".into()]).await;
}

async fn propagation_both_ways(args: Vec<String>) {
    use rustix::mount::{mount_bind_recursive, mount_change, MountPropagationFlags};
    let p = setup_with(vec![], "/usr/lib/cni", args).await;
    let image = app_image(&p).await;
    let pc = pod_config(&p, "prop");
    let pod = run(&p.h, pc.clone()).await.unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut guard = Unmount(Vec::new());
    for (prop, name, to_container, to_host) in [
        (
            MountPropagation::PropagationBidirectional,
            "shared",
            true,
            true,
        ),
        (
            MountPropagation::PropagationHostToContainer,
            "slave",
            true,
            false,
        ),
        (
            MountPropagation::PropagationPrivate,
            "private",
            false,
            false,
        ),
    ] {
        // As critest prepares it: a bind mount of the dir onto itself,
        // made rshared (or rprivate), and a source for a later host mount.
        let src = tmp.path().join(name).join("mnt");
        let host_mnt = src.join("from-host");
        let flag_dir = tmp.path().join(name).join("flag");
        std::fs::create_dir_all(&host_mnt).unwrap();
        std::fs::create_dir_all(&flag_dir).unwrap();
        std::fs::write(flag_dir.join("flagFile"), "x").unwrap();
        mount_bind_recursive(&src, &src).unwrap();
        guard.0.push(src.clone());
        let flags = if prop == MountPropagation::PropagationPrivate {
            MountPropagationFlags::PRIVATE | MountPropagationFlags::REC
        } else {
            MountPropagationFlags::SHARED | MountPropagationFlags::REC
        };
        mount_change(&src, flags).unwrap();

        let mut c = ccfg(&image, name, &["/bin/sleep", "600"], &[]);
        security(&mut c).privileged = true;
        c.mounts = vec![Mount {
            host_path: src.display().to_string(),
            container_path: src.display().to_string(),
            propagation: prop as i32,
            ..Default::default()
        }];
        let id = create(&p.h, &pod, &pc, c).await;
        let st =
            p.h.runtime()
                .await
                .container_status(ContainerStatusRequest {
                    container_id: id.clone(),
                    verbose: false,
                })
                .await
                .unwrap()
                .into_inner()
                .status
                .unwrap();
        assert_eq!(st.mounts[0].propagation, prop as i32);
        common::ctr::start(&p.h, &id).await;

        // Host → container.
        mount_bind_recursive(&flag_dir, &host_mnt).unwrap();
        guard.0.push(host_mnt.clone());
        let (_, out) = exec(&p.h, &id, &["ls", "-A", host_mnt.to_str().unwrap()]).await;
        assert_eq!(out.contains("flagFile"), to_container, "{name}: {out}");

        // Container → host.
        let cmnt = src.join("from-container");
        let script = format!("mkdir -p {0} && mount --bind /etc {0}", cmnt.display());
        assert_eq!(exec(&p.h, &id, &["sh", "-c", &script]).await.0, 0);
        let seen = std::fs::read_dir(&cmnt).map(|d| d.count()).unwrap_or(0) > 0;
        assert_eq!(seen, to_host, "{name}: container mount seen on the host");
        if seen {
            guard.0.push(cmnt);
        }
    }
    stop_remove_pod(&p.h, &pod).await;
    drop(guard);
    assert!(leftovers(&p).is_empty(), "{:?}", leftovers(&p));

    // A private source cannot give bidirectional propagation: refused.
    let pod = run(&p.h, pc.clone()).await.unwrap();
    let private = tempfile::tempdir().unwrap();
    let src = private.path().join("m");
    std::fs::create_dir_all(&src).unwrap();
    mount_bind_recursive(&src, &src).unwrap();
    let _g = Unmount(vec![src.clone()]);
    mount_change(&src, MountPropagationFlags::PRIVATE).unwrap();
    let mut c = ccfg(&image, "refused", &["/bin/sleep", "600"], &[]);
    c.mounts = vec![Mount {
        host_path: src.display().to_string(),
        container_path: "/m".into(),
        propagation: MountPropagation::PropagationBidirectional as i32,
        ..Default::default()
    }];
    let e = create_err(&p.h, &pod, &pc, c).await;
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("make-rshared"), "{e:?}");
    stop_remove_pod(&p.h, &pod).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn image_id_user_groups_policy_and_recursive_read_only() {
    if !common::require_root() {
        return;
    }
    use common::images::*;
    let p = setup(vec![]).await;
    // alice (1000) is listed in wheel (10) by the image.
    let img = Image::with_config(
        vec![
            Layer::new(&busybox_entries(), Compression::Gzip),
            Layer::new(
                &[
                    Entry::File(
                        "etc/passwd".into(),
                        b"root:x:0:0:root:/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/sh\n"
                            .to_vec(),
                        0o644,
                    ),
                    Entry::File(
                        "etc/group".into(),
                        b"root:x:0:\nalice:x:1000:\nwheel:x:10:alice\n".to_vec(),
                        0o644,
                    ),
                ],
                Compression::Gzip,
            ),
        ],
        "amd64",
        serde_json::json!({"Entrypoint": ["/bin/sh", "-c"], "Env": ["PATH=/bin"], "User": "1000"}),
    );
    Pusher::new(&p.reg)
        .image("app/groups", "v1", &img, Format::Oci)
        .await;
    let image = format!("{}/app/groups:v1", p.reg.host());
    let image_id = p.h.pull(&image).await.unwrap();

    let st = p.h.runtime_status().await;
    assert!(st.features.unwrap().supplemental_groups_policy);
    let handler = &st.runtime_handlers[0];
    assert_eq!(handler.name, "");
    let rro = handler
        .features
        .as_ref()
        .unwrap()
        .recursive_read_only_mounts;
    // User namespaces: where this node can idmap (tests/userns_pod.rs).
    assert_eq!(
        handler.features.as_ref().unwrap().user_namespaces,
        husk::idmap::Support::probe(&p.h.root()).pods()
    );

    let pc = pod_config(&p, "groups");
    let pod = run(&p.h, pc.clone()).await.unwrap();
    for (policy, want) in [
        (SupplementalGroupsPolicy::Merge, vec![10, 1000, 1234]),
        (SupplementalGroupsPolicy::Strict, vec![1000, 1234]),
    ] {
        let mut c = ccfg(&image, &format!("{policy:?}"), &["/bin/sleep", "600"], &[]);
        let sc = security(&mut c);
        sc.supplemental_groups = vec![1234];
        sc.supplemental_groups_policy = policy as i32;
        let id = create_start(&p.h, &pod, &pc, c).await;
        let st = common::ctr::container_status(&p.h, &id).await;
        assert_eq!(st.image_id, image_id, "image_id is the image's ID");
        // As containerd names them (the kubelet's image and imageID).
        assert_eq!(st.image.as_ref().unwrap().image, image);
        assert!(
            st.image_ref
                .starts_with(&format!("{}/app/groups@sha256:", p.reg.host())),
            "{}",
            st.image_ref
        );
        let u = st.user.unwrap().linux.unwrap();
        assert_eq!((u.uid, u.gid), (1000, 1000));
        assert_eq!(u.supplemental_groups, want, "{policy:?}");
        let (_, out) = exec(&p.h, &id, &["id", "-G"]).await;
        let mut got: Vec<i64> = out.split_whitespace().map(|g| g.parse().unwrap()).collect();
        got.sort_unstable();
        assert_eq!(got, want, "{policy:?}: groups of an exec");
    }

    // Read-only mounts: plain ones leave submounts writable, recursive ones
    // do not; a recursive one must be read-only and private.
    let host = tempfile::tempdir().unwrap();
    let sub = host.path().join("tmpfs");
    std::fs::create_dir_all(&sub).unwrap();
    rustix::mount::mount(
        "tmpfs",
        &sub,
        "tmpfs",
        rustix::mount::MountFlags::empty(),
        None,
    )
    .unwrap();
    let _g = Unmount(vec![sub.clone()]);
    let mount = |recursive: bool, readonly: bool, prop: MountPropagation| Mount {
        host_path: host.path().display().to_string(),
        container_path: "/mnt".into(),
        readonly,
        recursive_read_only: recursive,
        propagation: prop as i32,
        ..Default::default()
    };
    let mut c = ccfg(&image, "ro", &["/bin/sleep", "600"], &[]);
    security(&mut c).run_as_user = Some(Int64Value { value: 0 });
    c.mounts = vec![mount(false, true, MountPropagation::PropagationPrivate)];
    let id = create_start(&p.h, &pod, &pc, c.clone()).await;
    assert_eq!(exec(&p.h, &id, &["touch", "/mnt/tmpfs/plain"]).await.0, 0);
    assert_ne!(exec(&p.h, &id, &["touch", "/mnt/top"]).await.0, 0);
    if rro {
        c.metadata.as_mut().unwrap().name = "rro".into();
        c.mounts = vec![mount(true, true, MountPropagation::PropagationPrivate)];
        let id = create_start(&p.h, &pod, &pc, c.clone()).await;
        let (code, out) = exec(&p.h, &id, &["touch", "/mnt/tmpfs/recursive"]).await;
        assert_ne!(code, 0);
        assert!(out.contains("Read-only file system"), "{out}");
    }
    for bad in [
        mount(true, false, MountPropagation::PropagationPrivate),
        mount(true, true, MountPropagation::PropagationHostToContainer),
        mount(true, true, MountPropagation::PropagationBidirectional),
    ] {
        c.metadata.as_mut().unwrap().name = "bad".into();
        c.mounts = vec![bad];
        let e = create_err(&p.h, &pod, &pc, c.clone()).await;
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains("recursive_read_only"), "{e:?}");
    }
    stop_remove_pod(&p.h, &pod).await;
    assert!(leftovers(&p).is_empty(), "{:?}", leftovers(&p));
}

#[tokio::test(flavor = "multi_thread")]
async fn stop_leaves_no_process_behind_in_a_shared_pid_namespace() {
    if !common::require_root() {
        return;
    }
    let p = setup(vec![]).await;
    let image = app_image(&p).await;
    let pc = pod_config(&p, "leftovers");
    let pod = run(&p.h, pc.clone()).await.unwrap();
    let mut c = ccfg(&image, "main", &["/bin/sleep", "600"], &[]);
    security(&mut c).namespace_options = Some(NamespaceOption {
        pid: NamespaceMode::Pod as i32,
        ..Default::default()
    });
    let id = create_start(&p.h, &pod, &pc, c).await;
    // A process started by an exec outlives the exec.
    assert_eq!(
        exec(&p.h, &id, &["sh", "-c", "sleep 300 >/dev/null 2>&1 &"])
            .await
            .0,
        0
    );
    let procs = || {
        common::ctr::cgroup_file(&p, "memory", &id, "cgroup.procs")
            .lines()
            .count()
    };
    assert_eq!(procs(), 2, "the init and the exec'd sleep");
    p.h.runtime()
        .await
        .stop_container(StopContainerRequest {
            container_id: id.clone(),
            timeout: 5,
        })
        .await
        .unwrap();
    assert_eq!(procs(), 0, "nothing outlives a stopped container");
    stop_remove_pod(&p.h, &pod).await;
    assert!(leftovers(&p).is_empty(), "{:?}", leftovers(&p));
}

#[tokio::test(flavor = "multi_thread")]
async fn caller_paths_stay_in_their_roots_and_execs_leave_no_sockets() {
    if !common::require_root() {
        return;
    }
    let p = setup(vec![]).await;
    let image = app_image(&p).await;
    // A relative log directory would land at the shim's working directory.
    let mut bad = pod_config(&p, "rel");
    bad.log_directory = "logs".into();
    let e = run(&p.h, bad).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("log_directory"), "{e:?}");

    let pc = pod_config(&p, "paths");
    let pod = run(&p.h, pc.clone()).await.unwrap();
    let escape = tempfile::tempdir().unwrap();
    for log_path in [
        "../../../../../../../../..".to_string() + &escape.path().join("x").display().to_string(),
        "/tmp/absolute.log".to_string(),
    ] {
        let mut c = ccfg(&image, "esc", &["/bin/sleep", "600"], &[]);
        c.log_path = log_path.clone();
        let e = create_err(&p.h, &pod, &pc, c).await;
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{log_path}: {e:?}");
        assert!(e.message().contains("log_path"), "{e:?}");
    }
    assert!(!escape.path().join("x").exists());
    let mut c = ccfg(&image, "noimage", &["/bin/sleep", "600"], &[]);
    c.image = None;
    let e = create_err(&p.h, &pod, &pc, c).await;
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");

    // Execs: the notify sockets libcontainer leaves are swept.
    let id = create_start(
        &p.h,
        &pod,
        &pc,
        ccfg(&image, "c", &["/bin/sleep", "600"], &[]),
    )
    .await;
    let youki =
        p.h.dir
            .path()
            .join("run/s")
            .join(&pod)
            .join("youki")
            .join(&id);
    let sockets = || {
        std::fs::read_dir(&youki)
            .unwrap()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("tenant-notify-")
            })
            .count()
    };
    // Each exec's notify socket goes as soon as the exec has started.
    for _ in 0..3 {
        assert_eq!(exec(&p.h, &id, &["true"]).await.0, 0);
        assert_eq!(sockets(), 0, "an exec left its notify socket");
    }
    stop_remove_pod(&p.h, &pod).await;
    assert!(leftovers(&p).is_empty(), "{:?}", leftovers(&p));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_empty_id_is_invalid_argument_for_every_call_that_takes_one() {
    if !common::require_root() {
        return;
    }
    let h = common::server::Husk::start().await;
    let mut rt = h.runtime().await;
    let cid = || String::new();
    let codes = vec![
        (
            "StartContainer",
            rt.start_container(StartContainerRequest {
                container_id: cid(),
            })
            .await
            .err(),
        ),
        (
            "StopContainer",
            rt.stop_container(StopContainerRequest {
                container_id: cid(),
                timeout: 0,
            })
            .await
            .err(),
        ),
        (
            "RemoveContainer",
            rt.remove_container(RemoveContainerRequest {
                container_id: cid(),
            })
            .await
            .err(),
        ),
        (
            "ContainerStatus",
            rt.container_status(ContainerStatusRequest {
                container_id: cid(),
                verbose: false,
            })
            .await
            .err(),
        ),
        (
            "ReopenContainerLog",
            rt.reopen_container_log(ReopenContainerLogRequest {
                container_id: cid(),
            })
            .await
            .err(),
        ),
        (
            "ExecSync",
            rt.exec_sync(ExecSyncRequest {
                container_id: cid(),
                cmd: vec!["true".into()],
                timeout: 1,
            })
            .await
            .err(),
        ),
        (
            "PodSandboxStatus",
            rt.pod_sandbox_status(PodSandboxStatusRequest {
                pod_sandbox_id: cid(),
                verbose: false,
            })
            .await
            .err(),
        ),
        (
            "StopPodSandbox",
            rt.stop_pod_sandbox(StopPodSandboxRequest {
                pod_sandbox_id: cid(),
            })
            .await
            .err(),
        ),
        (
            "RemovePodSandbox",
            rt.remove_pod_sandbox(RemovePodSandboxRequest {
                pod_sandbox_id: cid(),
            })
            .await
            .err(),
        ),
    ];
    for (call, e) in codes {
        let e = e.unwrap_or_else(|| panic!("{call} with an empty id succeeded"));
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{call}: {e:?}");
        assert!(
            e.message().contains("_id is required"),
            "{call}: {}",
            e.message()
        );
    }
}
