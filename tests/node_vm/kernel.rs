//! This kernel's side of a node: `husk check` on cgroup v2, AppArmor
//! (Debian's kernel has it), seccomp, and mount propagation into a
//! container.

use super::*;
use common::ctr::{app_image, ccfg, create, create_start, security, try_create};
use common::pod::{leftovers, run, setup};
use husk::api::cri::security_profile::ProfileType;
use std::process::Command;

/// A profile the test loads: everything allowed but writes under /tmp.
const DENY_TMP_WRITE: &str = "#include <tunables/global>
profile husk-test-deny-tmp-write flags=(attach_disconnected) {
  #include <abstractions/base>
  file,
  network,
  capability,
  signal,
  deny /tmp/** w,
}
";

fn apparmor_profile(c: &mut ContainerConfig, t: ProfileType, name: &str) {
    let sc = security(c);
    sc.apparmor = Some(SecurityProfile {
        profile_type: t as i32,
        localhost_ref: name.into(),
    });
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "runs in the node VM (cgroup_v2_node)"]
async fn guest_check_apparmor_seccomp_propagation() {
    guest();
    let mut p = setup(vec![]).await;
    let parent = kubelet_parent(&mut p);
    let image = app_image(&p).await;

    // husk check: v2, each controller and its delegation, AppArmor.
    let report = Command::new(env!("CARGO_BIN_EXE_husk"))
        .args(["check", "--json", "--cni-bin-dir", "/usr/lib/cni"])
        .arg("--root")
        .arg(p.h.root())
        .arg("--listen")
        .arg(p.h.socket())
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    let find = |name: &str| -> serde_json::Value {
        report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["check"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name} check in {report}"))
    };
    assert_eq!(
        find("cgroups")["message"],
        "cgroup v2 (unified)",
        "{report}"
    );
    for c in ["cpu", "memory", "pids"] {
        let c = find(&format!("cgroup {c}"));
        assert_eq!(c["status"], "ok", "{c}");
        assert!(
            c["message"].as_str().unwrap().contains("subtree_control"),
            "{c}"
        );
    }
    let aa = find("AppArmor");
    let kernel_has_apparmor = read(Path::new("/sys/module/apparmor/parameters/enabled")) == "Y";
    assert_eq!(
        aa["message"].as_str().unwrap().starts_with("enabled"),
        kernel_has_apparmor,
        "{aa}"
    );

    let pc = pod_under(&p, "kernel", &parent);
    let pod = run(&p.h, pc.clone()).await.unwrap();

    // AppArmor, where the kernel has it (Debian's does).
    if kernel_has_apparmor {
        // No request is the runtime default, as with containerd: husk's
        // profile, loaded at first use; execs run under it too.
        // Both hold CAP_SYS_ADMIN: only the profile keeps mount(2) away.
        let admin = |name: &str| {
            let mut c = ccfg(&image, name, &["sleep", "3600"], &[]);
            security(&mut c).capabilities = Some(Capability {
                add_capabilities: vec!["SYS_ADMIN".into()],
                ..Default::default()
            });
            c
        };
        let id = create_start(&p.h, &pod, &pc, admin("aa-default")).await;
        let cur = out(&p.h, &id, "cat /proc/1/attr/current").await;
        assert_eq!(cur, "husk-default (enforce)");
        assert_eq!(
            out(&p.h, &id, "cat /proc/self/attr/current").await,
            "husk-default (enforce)"
        );
        let (code, _, err) = sh(&p.h, &id, "mkdir -p /m && mount -t tmpfs none /m").await;
        assert_ne!(code, 0, "the default profile let mount(2) through");
        assert!(err.contains("denied"), "{err}");

        // Localhost, with and without the prefix the kubelet sends.
        let mut load = Command::new("apparmor_parser")
            .args(["--replace"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        load.stdin
            .take()
            .unwrap()
            .write_all(DENY_TMP_WRITE.as_bytes())
            .unwrap();
        assert!(load.wait().unwrap().success());
        for (i, name) in [
            "husk-test-deny-tmp-write",
            "localhost/husk-test-deny-tmp-write",
        ]
        .iter()
        .enumerate()
        {
            let mut c = ccfg(&image, &format!("aa-local-{i}"), &["sleep", "3600"], &[]);
            apparmor_profile(&mut c, ProfileType::Localhost, name);
            let id = create_start(&p.h, &pod, &pc, c).await;
            let (code, _, err) = sh(&p.h, &id, "touch /tmp/x").await;
            assert_ne!(code, 0, "{name}: a denied write passed");
            assert!(err.contains("Permission denied"), "{name}: {err}");
            out(&p.h, &id, "touch /x").await;
        }
        // The deprecated field means the same.
        let mut c = ccfg(&image, "aa-deprecated", &["sleep", "3600"], &[]);
        #[allow(deprecated)]
        {
            security(&mut c).apparmor_profile = "localhost/husk-test-deny-tmp-write".into();
        }
        let id = create_start(&p.h, &pod, &pc, c).await;
        assert_ne!(sh(&p.h, &id, "touch /tmp/x").await.0, 0);
        // Unconfined, and a profile that is not loaded.
        let mut c = admin("aa-unconfined");
        apparmor_profile(&mut c, ProfileType::Unconfined, "");
        let id = create_start(&p.h, &pod, &pc, c).await;
        assert_eq!(
            out(&p.h, &id, "cat /proc/self/attr/current").await,
            "unconfined"
        );
        out(&p.h, &id, "mkdir -p /m && mount -t tmpfs none /m").await;
        let mut c = ccfg(&image, "aa-missing", &["sleep", "3600"], &[]);
        apparmor_profile(
            &mut c,
            ProfileType::Localhost,
            "localhost/husk-no-such-profile",
        );
        let e = try_create(&p.h, &pod, &pc, c).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains("husk-no-such-profile"), "{e:?}");
    }

    // Seccomp RuntimeDefault on this kernel: forks work, unshare does not.
    let mut c = ccfg(&image, "seccomp", &["sleep", "3600"], &[]);
    security(&mut c).seccomp = Some(SecurityProfile {
        profile_type: ProfileType::RuntimeDefault as i32,
        localhost_ref: String::new(),
    });
    let id = create_start(&p.h, &pod, &pc, c).await;
    assert_eq!(out(&p.h, &id, "echo forked | cat").await, "forked");
    assert_ne!(sh(&p.h, &id, "unshare -U true").await.0, 0);
    assert_eq!(
        out(&p.h, &id, "grep Seccomp: /proc/self/status").await,
        "Seccomp:\t2"
    );

    // Mount propagation, host to container (rslave), as critest sets it up.
    use rustix::mount::{
        mount_bind_recursive, mount_change, unmount, MountPropagationFlags, UnmountFlags,
    };
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("mnt");
    let flag = tmp.path().join("flag");
    std::fs::create_dir_all(src.join("from-host")).unwrap();
    std::fs::create_dir_all(&flag).unwrap();
    std::fs::write(flag.join("flagFile"), "x").unwrap();
    mount_bind_recursive(&src, &src).unwrap();
    mount_change(
        &src,
        MountPropagationFlags::SHARED | MountPropagationFlags::REC,
    )
    .unwrap();
    let mut c = ccfg(&image, "prop", &["sleep", "3600"], &[]);
    c.mounts = vec![Mount {
        host_path: src.display().to_string(),
        container_path: "/mnt".into(),
        propagation: MountPropagation::PropagationHostToContainer as i32,
        ..Default::default()
    }];
    let id = create(&p.h, &pod, &pc, c).await;
    common::ctr::start(&p.h, &id).await;
    mount_bind_recursive(&flag, src.join("from-host")).unwrap();
    assert_eq!(out(&p.h, &id, "ls /mnt/from-host").await, "flagFile");
    let _ = unmount(src.join("from-host"), UnmountFlags::DETACH);
    let _ = unmount(&src, UnmountFlags::DETACH);

    common::pod::remove_listed(&p).await;
    assert_eq!(leftovers(&p), Vec::<String>::new());
    assert!(child_cgroups(&v2_dir(&parent)).is_empty());
    remove_parent(&parent);
}
