//! User namespaces on this kernel (Debian 12's 6.1): tmpfs cannot be
//! idmapped before Linux 6.3, so Status advertises no user namespaces and
//! `husk check` says why. A `hostUsers: false` pod whose root is on ext4
//! still runs when asked (overlayfs over idmapped layers, Linux 5.19), in
//! its own cgroup namespace on cgroup v2; a volume on tmpfs the kubelet
//! sends idmapped is refused with the filesystem named, and nothing is
//! left.

use super::*;
use common::ctr::{app_image, ccfg, create_start, stop_remove_pod, try_create};
use common::pod::{leftovers, run, setup};
use common::userns::*;
use std::os::unix::fs::MetadataExt;
use std::process::Command;

const HOST: u32 = 65536 * 3;

fn ok(cmd: &mut Command) {
    let o = cmd.output().unwrap();
    assert!(
        o.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A mount sent with the pod's mappings, as the kubelet sends it.
fn idmapped(container_path: &str, host: &Path) -> Mount {
    Mount {
        container_path: container_path.into(),
        host_path: host.display().to_string(),
        uid_mappings: vec![map(0, HOST, 65536)],
        gid_mappings: vec![map(0, HOST, 65536)],
        ..Default::default()
    }
}

/// Whether this kernel is older than `major.minor`.
fn kernel_before(major: u32, minor: u32) -> bool {
    let rel = rustix::system::uname()
        .release()
        .to_string_lossy()
        .into_owned();
    let mut v = rel.split(['.', '-']).filter_map(|x| x.parse::<u32>().ok());
    (v.next().unwrap_or(0), v.next().unwrap_or(0)) < (major, minor)
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "runs in the node VM (cgroup_v2_node)"]
async fn guest_user_namespaces_on_this_kernel() {
    guest();
    // husk's root on ext4 (a loop device), the kubelet's volumes on tmpfs.
    let base = tempfile::tempdir().unwrap();
    let (img, ext4) = (base.path().join("ext4.img"), base.path().join("ext4"));
    std::fs::create_dir(&ext4).unwrap();
    let _ = Command::new("modprobe")
        .args(["-a", "loop", "ext4"])
        .status();
    ok(Command::new("truncate").args(["-s", "512M"]).arg(&img));
    ok(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&img));
    ok(Command::new("mount")
        .args(["-o", "loop"])
        .arg(&img)
        .arg(&ext4));
    let tmp = std::env::var_os("TMPDIR");
    std::env::set_var("TMPDIR", &ext4);
    let mut p = setup(vec![]).await;
    match tmp {
        Some(t) => std::env::set_var("TMPDIR", t),
        None => std::env::remove_var("TMPDIR"),
    }
    let parent = kubelet_parent(&mut p);
    let image = app_image(&p).await;

    let support = husk::idmap::Support::probe(&p.h.root());
    assert!(support.root.is_ok(), "ext4 idmaps: {:?}", support.root);
    assert_eq!(
        support.tmpfs.is_err(),
        kernel_before(6, 3),
        "{:?}",
        support.tmpfs
    );
    let advertised = p.h.runtime_status().await.runtime_handlers[0]
        .features
        .as_ref()
        .unwrap()
        .user_namespaces;
    assert_eq!(advertised, support.pods());
    let report = Command::new(env!("CARGO_BIN_EXE_husk"))
        .args(["check", "--json", "--root"])
        .arg(p.h.root())
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    let line = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "user namespaces")
        .cloned()
        .unwrap();
    if kernel_before(6, 3) {
        assert_eq!(line["status"], "warn", "{line}");
        assert!(line["message"].as_str().unwrap().contains("6.3"), "{line}");
    }

    // The pod runs, in its user namespace and its own cgroup namespace.
    let m = || vec![map(0, HOST, 65536)];
    let pc = with_userns(
        pod_under(&p, "userns", &parent),
        userns(NamespaceMode::Pod, m(), m()),
    );
    let pod = run(&p.h, pc.clone()).await.unwrap();
    let on_ext4 = ext4.join("vol");
    std::fs::create_dir(&on_ext4).unwrap();
    std::fs::write(on_ext4.join("f"), "root's").unwrap();
    let mut c = ccfg(&image, "c", &["/bin/sleep", "600"], &[]);
    c.mounts = vec![idmapped("/vol", &on_ext4)];
    container_userns(&mut c, userns(NamespaceMode::Pod, m(), m()));
    let id = create_start(&p.h, &pod, &pc, c.clone()).await;
    let (code, out, err) = sh(
        &p.h,
        &id,
        "cat /proc/self/uid_map /proc/self/cgroup; stat -c %u /vol/f /bin/busybox; echo x > /vol/new",
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    let words: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(
        words,
        ["0", &HOST.to_string(), "65536", "0::/", "0", "0"],
        "{out}"
    );
    assert_eq!(std::fs::metadata(on_ext4.join("new")).unwrap().uid(), 0);

    // A volume on tmpfs, idmapped as the kubelet asks: refused where the
    // kernel cannot, with the filesystem named; nothing of it is made.
    let on_tmpfs = base.path().join("secret");
    std::fs::create_dir(&on_tmpfs).unwrap();
    let mut s = ccfg(&image, "s", &["/bin/sleep", "600"], &[]);
    s.mounts = vec![idmapped("/secret", &on_tmpfs)];
    container_userns(&mut s, userns(NamespaceMode::Pod, m(), m()));
    match try_create(&p.h, &pod, &pc, s).await {
        Err(st) => {
            assert!(support.tmpfs.is_err(), "{st:?}");
            assert_eq!(st.code(), tonic::Code::FailedPrecondition, "{st:?}");
            assert!(st.message().contains("tmpfs"), "{st:?}");
        }
        Ok(_) => assert!(
            support.tmpfs.is_ok(),
            "tmpfs was idmapped on a kernel that cannot"
        ),
    }

    stop_remove_pod(&p.h, &pod).await;
    assert_eq!(leftovers(&p), Vec::<String>::new());
    drop(p);
    ok(Command::new("umount").arg(&ext4));
}
