//! `husk serve` itself: config and flags, the socket, Version / Status /
//! RuntimeConfig, Unimplemented answers for RPCs husk does not provide, graceful shutdown,
//! one server per root.
#![allow(clippy::unwrap_used)]

mod common;

use common::server::Husk;
use husk::api::cri::*;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::process::Command;

fn husk() -> Command {
    Command::new(env!("CARGO_BIN_EXE_husk"))
}

#[test]
fn config_default_is_documented_and_round_trips() {
    let out = husk().args(["config", "default"]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("# ") && text.contains("[registry]") && text.contains("sandbox_image"));
    let parsed = husk::config::Config::parse(&text).unwrap();
    assert_eq!(parsed, husk::config::Config::default());
}

#[test]
fn bad_config_and_flags_exit_2_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(
        &cfg,
        "root = \"/tmp/x\"\n[registry]\nmax_concurrent_downloads = \"many\"\n",
    )
    .unwrap();
    let out = husk()
        .arg("serve")
        .arg("--config")
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(
        err.contains("max_concurrent_downloads") || err.contains("invalid type"),
        "{err}"
    );

    let out = husk()
        .args(["serve", "--log-format", "xml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("log_format"));

    let out = husk()
        .args(["serve", "--root", "relative/dir"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("root"));

    let out = husk()
        .args(["serve", "--cgroup-driver", "cgroup"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not one of"));

    // The systemd driver where it cannot work (cgroup v1, or systemd not
    // PID 1) is refused at start, naming the fix; never a silent cgroupfs.
    if !std::path::Path::new("/run/systemd/system").is_dir() {
        let out = husk()
            .args(["serve", "--cgroup-driver", "systemd", "--root"])
            .arg(dir.path().join("root"))
            .arg("--state")
            .arg(dir.path().join("run"))
            .arg("--listen")
            .arg(dir.path().join("s.sock"))
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("driver = \"cgroupfs\""), "{err}");
        assert!(!dir.path().join("s.sock").exists() && !dir.path().join("root").exists());
    }

    let out = husk().args(["serve", "--no-such-flag"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));

    let out = husk()
        .arg("serve")
        .arg("--config")
        .arg(dir.path().join("missing.toml"))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "an explicit missing config is an error"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn socket_runtime_rpcs_and_shutdown() {
    if !common::require_root() {
        return;
    }
    // A stale socket file from a crash is replaced.
    let dir = tempfile::tempdir().unwrap();
    let mut h = Husk::start_with(vec![]).await;
    let sock = h.socket();
    let md = std::fs::metadata(&sock).unwrap();
    assert!(md.file_type().is_socket());
    assert_eq!(md.permissions().mode() & 0o777, 0o660);

    let mut rt = h.runtime().await;
    let v = rt
        .version(VersionRequest {
            version: "v1".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(v.runtime_name, "husk");
    assert_eq!(v.runtime_api_version, "v1");
    assert_eq!(v.runtime_version, env!("CARGO_PKG_VERSION"));

    let st = rt
        .status(StatusRequest { verbose: false })
        .await
        .unwrap()
        .into_inner()
        .status
        .unwrap();
    let cond = |t: &str| {
        st.conditions
            .iter()
            .find(|c| c.r#type == t)
            .cloned()
            .unwrap()
    };
    assert!(cond("RuntimeReady").status);
    let net = cond("NetworkReady");
    assert!(!net.status, "no CNI config yet");
    assert_eq!(net.reason, "NetworkPluginNotReady");
    // A conflist appears: NetworkReady turns true.
    std::fs::create_dir_all(h.dir.path().join("net.d")).unwrap();
    std::fs::write(h.dir.path().join("net.d/10-test.conflist"), "{}").unwrap();
    let st = rt
        .status(StatusRequest { verbose: false })
        .await
        .unwrap()
        .into_inner()
        .status
        .unwrap();
    assert!(st
        .conditions
        .iter()
        .any(|c| c.r#type == "NetworkReady" && c.status));

    let rc = rt
        .runtime_config(RuntimeConfigRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        rc.linux.unwrap().cgroup_driver,
        CgroupDriver::Cgroupfs as i32
    );

    // An RPC husk does not provide answers Unimplemented, naming itself.
    let e = rt
        .checkpoint_container(CheckpointContainerRequest::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unimplemented);
    assert!(
        e.message().contains("CheckpointContainer"),
        "{}",
        e.message()
    );
    // An unknown container is NotFound; a container without config is InvalidArgument.
    let e = rt
        .container_status(ContainerStatusRequest {
            container_id: "nope".into(),
            verbose: false,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);
    let e = rt
        .create_container(CreateContainerRequest::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    // A sandbox without config is InvalidArgument.
    let e = rt
        .run_pod_sandbox(RunPodSandboxRequest::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);

    // A second server on the same root is refused.
    let out = husk()
        .arg("serve")
        .arg("--root")
        .arg(h.root())
        .arg("--state")
        .arg(dir.path().join("run"))
        .arg("--listen")
        .arg(dir.path().join("other.sock"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("another husk serve"));

    // SIGTERM: exit 0, socket removed; a restart over a stale socket works.
    let st = h.terminate();
    assert!(st.success());
    assert!(!sock.exists());
    std::os::unix::net::UnixListener::bind(&sock).unwrap();
    h.spawn().await;
    assert!(h.list().await.is_empty());
}
