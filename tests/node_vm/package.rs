//! The Debian package under systemd as PID 1 (`systemd_node`), step by
//! step as an operator goes: `dpkg -i` (postinst enables and starts the
//! unit), the operator's config, `systemctl restart husk`, `husk check`,
//! a pod through the socket, `systemctl reload husk` (a conf.d drop-in
//! applied while it runs), `systemctl restart husk` (the pod keeps
//! running and is listed), `systemctl stop husk` (the shims keep running:
//! KillMode=process), `dpkg -r` (the conffile and state stay), `dpkg
//! --purge` (both go, with the defaults postinst installed).

use super::*;
use common::ctr::{app_image, ccfg, pod_config};
use common::pod::setup_with;
use husk::api::cri::image_service_client::ImageServiceClient;
use husk::api::cri::runtime_service_client::RuntimeServiceClient;
use std::process::Command;

const SOCK: &str = "/run/husk/husk.sock";

fn run_ok(cmd: &str, args: &[&str]) -> String {
    let o = Command::new(cmd).args(args).output().unwrap();
    assert!(
        o.status.success(),
        "{cmd} {args:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn active() -> String {
    let o = Command::new("systemctl")
        .args(["is-active", "husk"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

async fn runtime() -> RuntimeServiceClient<tonic::transport::Channel> {
    let ch = crate::wait_for!(60, "husk.service to answer", {
        match husk::api::connect(&format!("unix://{SOCK}")).await {
            Ok(ch) => {
                // Ready once recovery is done (until then: Unavailable).
                let mut c = RuntimeServiceClient::new(ch.clone());
                c.list_containers(ListContainersRequest { filter: None })
                    .await
                    .ok()
                    .map(|_| ch)
            }
            Err(_) => None,
        }
    });
    RuntimeServiceClient::new(ch)
}

fn alive(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "runs in the systemd node VM (systemd_node)"]
async fn in_systemd_vm_the_package_under_systemd() {
    guest();
    let deb = std::env::var("HUSK_DEB").expect("HUSK_DEB: the package the host test built");
    // The test's registry (pause and app images) and network.
    let p = setup_with(vec![], "/usr/lib/cni", vec![]).await;
    let image = app_image(&p).await;
    let had_cni = Path::new("/etc/cni/net.d").exists();

    // husk's root on a file system of its own, as on a node (the guest's
    // root is an overlay, where an overlay's upper dir cannot be).
    std::fs::create_dir_all("/var/lib/husk").unwrap();
    run_ok(
        "mount",
        &["-t", "tmpfs", "-o", "size=1g", "husk", "/var/lib/husk"],
    );
    // This machine's image forbids maintainer scripts to start services
    // (policy-rc.d, as container images have it); a node has none. The
    // guest's root is a copy: it goes there only.
    let _ = std::fs::remove_file("/usr/sbin/policy-rc.d");
    run_ok("dpkg", &["-i", &deb]);
    assert_eq!(active(), "active", "postinst starts husk under systemd");
    assert_eq!(
        run_ok("systemctl", &["is-enabled", "husk"]).trim(),
        "enabled"
    );
    let shipped = read(Path::new("/etc/husk/config.toml"));
    assert!(shipped.contains("driver = \"auto\""), "{shipped}");

    // The operator's settings: the node's registry and network.
    let cfg = shipped
        .replace(
            "sandbox_image = \"registry.k8s.io/pause:3.10\"",
            &format!("sandbox_image = \"{}/k8s/pause:test\"", p.reg.host()),
        )
        .replace(
            "conf_dir = \"/etc/cni/net.d\"",
            &format!(
                "conf_dir = {:?}",
                p.h.dir.path().join("net.d").display().to_string()
            ),
        );
    std::fs::write("/etc/husk/config.toml", cfg).unwrap();
    run_ok("systemctl", &["restart", "husk"]);
    let mut rt = runtime().await;
    assert_eq!(
        driver_of(rt.clone()).await,
        CgroupDriver::Systemd,
        "auto picks systemd where it is PID 1"
    );
    let check = Command::new("husk").arg("check").output().unwrap();
    let report = String::from_utf8_lossy(&check.stdout);
    assert_ne!(check.status.code(), Some(2), "husk check failed:\n{report}");
    assert!(
        report
            .lines()
            .any(|l| l.starts_with("ok") && l.contains("cgroup driver") && l.contains("systemd")),
        "{report}"
    );

    // A pod through the socket.
    ImageServiceClient::new(husk::api::connect(&format!("unix://{SOCK}")).await.unwrap())
        .pull_image(PullImageRequest {
            image: Some(ImageSpec {
                image: image.clone(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut pc = pod_config(&p, "pkg");
    pc.linux.as_mut().unwrap().cgroup_parent = String::new();
    let pod = rt
        .run_pod_sandbox(RunPodSandboxRequest {
            config: Some(pc.clone()),
            runtime_handler: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .pod_sandbox_id;
    assert_eq!(
        run_ok(
            "systemctl",
            &[
                "show",
                "-p",
                "Slice",
                "--value",
                &format!("husk-{pod}.scope")
            ]
        )
        .trim(),
        "husk.slice"
    );
    let id = rt
        .create_container(CreateContainerRequest {
            pod_sandbox_id: pod.clone(),
            config: Some(ccfg(&image, "web", &["sleep", "3600"], &[])),
            sandbox_config: Some(pc.clone()),
        })
        .await
        .unwrap()
        .into_inner()
        .container_id;
    rt.start_container(StartContainerRequest {
        container_id: id.clone(),
    })
    .await
    .unwrap();
    // The container's process, in its scope under husk.slice.
    let procs = format!("/sys/fs/cgroup/husk.slice/husk-{id}.scope/cgroup.procs");
    let pid: i32 = read(Path::new(&procs))
        .lines()
        .next()
        .and_then(|l| l.parse().ok())
        .unwrap_or_else(|| panic!("no process in {procs}"));
    assert!(alive(pid));
    let status = |rt: &mut RuntimeServiceClient<tonic::transport::Channel>| {
        let id = id.clone();
        let mut rt = rt.clone();
        async move {
            rt.container_status(ContainerStatusRequest {
                container_id: id,
                verbose: false,
            })
            .await
            .unwrap()
            .into_inner()
        }
    };

    // `systemctl reload husk`: a drop-in of the shipped conf.d applied
    // while the pod runs (the unit's ExecReload sends SIGHUP).
    assert!(
        Path::new("/etc/husk/conf.d").is_dir(),
        "the package ships conf.d"
    );
    std::fs::write("/etc/husk/conf.d/50-test.toml", "log_level = \"debug\"\n").unwrap();
    run_ok("systemctl", &["reload", "husk"]);
    crate::wait_for!(30, "the reload in the journal", {
        run_ok("journalctl", &["-u", "husk", "--no-pager", "-o", "cat"])
            .contains("config reloaded")
            .then_some(())
    });
    assert_eq!(active(), "active");
    assert_eq!(
        status(&mut rt).await.status.unwrap().state,
        ContainerState::ContainerRunning as i32
    );
    std::fs::remove_file("/etc/husk/conf.d/50-test.toml").unwrap();

    // A restart keeps the pod running and listed.
    run_ok("systemctl", &["restart", "husk"]);
    let mut rt = runtime().await;
    let st = status(&mut rt).await;
    assert_eq!(
        st.status.as_ref().unwrap().state,
        ContainerState::ContainerRunning as i32
    );
    assert!(alive(pid));
    let pods = rt
        .list_pod_sandbox(ListPodSandboxRequest { filter: None })
        .await
        .unwrap()
        .into_inner()
        .items;
    assert!(pods.iter().any(|s| s.id == pod));

    // A stop leaves the pods to their shims.
    run_ok("systemctl", &["stop", "husk"]);
    assert_eq!(active(), "inactive");
    assert!(alive(pid), "systemctl stop husk killed a container");
    run_ok("systemctl", &["start", "husk"]);
    let mut rt = runtime().await;
    for r in [
        rt.stop_pod_sandbox(StopPodSandboxRequest {
            pod_sandbox_id: pod.clone(),
        })
        .await
        .map(|_| ()),
        rt.remove_pod_sandbox(RemovePodSandboxRequest {
            pod_sandbox_id: pod.clone(),
        })
        .await
        .map(|_| ()),
    ] {
        r.unwrap();
    }
    assert!(!alive(pid));

    // Remove: the program and unit go; the conffile and state stay.
    run_ok("dpkg", &["-r", "husk"]);
    assert_eq!(active(), "inactive");
    assert!(!Path::new("/usr/bin/husk").exists());
    assert!(!Path::new("/lib/systemd/system/husk.service").exists());
    assert!(Path::new("/etc/husk/config.toml").exists());
    assert!(Path::new("/var/lib/husk").is_dir());
    // Purge: the conffile, the state, and the defaults postinst put in.
    run_ok("dpkg", &["--purge", "husk"]);
    assert!(!Path::new("/etc/husk/config.toml").exists());
    let left: Vec<_> = std::fs::read_dir("/var/lib/husk")
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "purge left {left:?} in /var/lib/husk");
    assert!(!Path::new("/run/husk").exists());
    let _ = Command::new("umount").arg("/var/lib/husk").status();
    assert!(!Path::new("/etc/crictl.yaml").exists());
    if !had_cni {
        assert!(!Path::new("/etc/cni/net.d/10-husk.conflist").exists());
    }
}
