//! The attacks whose defence depends on the kernel, on 6.1 and cgroup v2
//! (the host suite's `security.rs` runs them on this machine's kernel):
//! no runtime descriptor at a payload's execve (close_range, or the
//! per-descriptor fallback), and the sealed binary the shims run from —
//! here the test binary lives on the guest's 9p share, where overlayfs may
//! refuse it as a lower layer and the sealed memfd copy is used instead;
//! and round two (a volume at /dev, neighbours racing a nested mount onto
//! /dev, /dev/pts or /proc), on husk's own path.

use super::*;
use common::ctr::{app_image, ccfg, create, exec_sync, run_to_exit, shell, start};
use common::pod::{leftovers, run, setup};
use std::os::unix::fs::MetadataExt;

#[tokio::test(flavor = "multi_thread")]
#[ignore = "runs in the node VM (cgroup_v2_node)"]
async fn guest_no_runtime_descriptor_and_a_sealed_shim() {
    guest();
    let mut p = setup(vec![]).await;
    let parent = kubelet_parent(&mut p);
    let image = app_image(&p).await;
    let pc = pod_under(&p, "sec", &parent);
    let pod = run(&p.h, pc.clone()).await.unwrap();

    // Created, not started: its init (a clone of the shim) waits.
    let id = create(&p.h, &pod, &pc, shell(&image, "c", "sleep 3600", &[])).await;
    let host = std::fs::metadata(env!("CARGO_BIN_EXE_husk")).unwrap();
    let shim = common::pod::shim_pid(&p.h, &pod);
    let exe = format!("/proc/{shim}/exe");
    let md = std::fs::metadata(&exe).unwrap();
    assert_ne!(
        (md.dev(), md.ino()),
        (host.dev(), host.ino()),
        "the shim runs the node's husk"
    );
    let e = std::fs::OpenOptions::new()
        .write(true)
        .open(&exe)
        .map(|_| ())
        .expect_err("the shim's binary opened for writing");
    // A sealed memfd opens for writing only to refuse every write.
    if e.raw_os_error() != Some(libc::EROFS) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().write(true).open(&exe).unwrap();
        assert!(f.write_all(b"x").is_err(), "the sealed copy took a write");
    }
    println!(
        "sealed: {} ({e})",
        std::fs::read_link(&exe).unwrap().display()
    );
    start(&p.h, &id).await;

    let ls = exec_sync(&p.h, &id, &["ls", "/proc/self/fd"])
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&ls.stdout)
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["0", "1", "2", "3"]
    );
    for n in 3..=64 {
        let argv0 = format!("/proc/self/fd/{n}/self/root/bin/busybox");
        if let Ok(r) = exec_sync(&p.h, &id, &[&argv0, "echo", "escaped"]).await {
            assert_ne!(r.exit_code, 0, "fd {n}: {r:?}");
        }
    }
    for n in [3, 5, 7, 9, 11, 13, 15, 20, 25, 28, 30, 35, 40] {
        let argv0 = format!("/proc/self/fd/{n}/self/root/bin/busybox");
        let c = ccfg(&image, &format!("a{n}"), &[&argv0], &["echo", "escaped"]);
        if let Some(st) = run_to_exit(&p.h, &pod, &pc, c).await {
            assert_ne!(st.exit_code, 0, "fd {n} ran");
        }
    }
    common::ctr::stop_remove_pod(&p.h, &pod).await;
    assert!(leftovers(&p).is_empty(), "{:?}", leftovers(&p));
}

/// Hostile pods, round two, on this kernel and cgroup v2 (the host suite's
/// `security_masks.rs` runs them on the host's, under runc too): a
/// volume at /dev is refused with nothing written, and a neighbour
/// redirecting a nested mount onto /dev, /dev/pts or /proc through a
/// shared emptyDir is contained.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "runs in the node VM (cgroup_v2_node)"]
async fn guest_masks_dev_volumes_and_racing_neighbours() {
    guest();
    let mut p = setup(vec![]).await;
    kubelet_parent(&mut p);
    let image = common::masks::canary_image(&p).await;
    let node = tempfile::tempdir().unwrap();
    let (pod, pc) = common::masks::pod_under(&p, "devvol", "").await;
    let mut c = ccfg(&image, "dev", &[], &[]);
    c.mounts = vec![common::masks::bind(node.path(), "/volume")];
    let e = common::ctr::try_create(&p.h, &pod, &pc, c)
        .await
        .expect_err("a volume at /dev through the image's link");
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(common::masks::listing(node.path()).is_empty());
    common::ctr::stop_remove_pod(&p.h, &pod).await;
    for race in &common::masks::RACES {
        common::masks::race(&p, &image, "", race, 100, 3).await;
    }
    assert!(leftovers(&p).is_empty(), "{:?}", leftovers(&p));
}
