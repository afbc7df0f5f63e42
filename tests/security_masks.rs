//! Hostile pods, round two (README, "Security"): what masks a pod's masked
//! paths, a volume at `/dev`, and mounts that a racing container of the
//! same pod redirects through a shared emptyDir onto `/dev`, `/dev/pts` or
//! `/proc` (the classes of CVE-2025-31133, -52565 and -52881). Each runs on
//! husk's own path and under the runc handler; what each attack observes
//! is asserted, with harmless observables only (a canary file of the
//! container's own image, the pod's own view of `/proc`).
#![allow(clippy::unwrap_used)]

mod common;

use common::ctr::*;
use common::masks::{self, bind, canary_image, listing, pod_under, HANDLERS, RACES};
use common::pod;

/// A volume at `/dev` — named so, through an image symlink, or a runtime's
/// own node under it — is InvalidArgument naming the mount, on every
/// handler and for privileged containers too (but a privileged
/// container's whole `/dev` under an OCI handler); the node's directory
/// behind it is left as it was (no device node, no link), and nothing of
/// the container is left. A mount under `/dev` that is not the runtime's
/// (the kubelet's termination log) still works, and the masks are
/// genuine `/dev/null`s.
#[tokio::test(flavor = "multi_thread")]
async fn a_volume_at_dev_is_refused_and_nothing_is_written_into_it() {
    if !common::require_root() {
        return;
    }
    let p = pod::setup(vec![]).await;
    let img = canary_image(&p).await;
    let node = tempfile::tempdir().unwrap();
    // What CVE-2025-31133 plants: /dev/null naming the container's file.
    std::os::unix::fs::symlink("../canary", node.path().join("null")).unwrap();
    let node_file = node.path().join("file");
    std::fs::write(&node_file, "").unwrap();
    let before = listing(node.path());
    for handler in HANDLERS {
        let (pod, pc) = pod_under(&p, &format!("dev{}", handler.len()), handler).await;
        for (dest, src) in [
            ("/dev", node.path()),
            ("/dev/", node.path()),
            ("//dev/.", node.path()),
            ("/volume", node.path()),
            ("/devlink", node.path()),
            ("/dev/pts", node.path()),
            ("/volume/null", node_file.as_path()),
            ("/dev/console", node_file.as_path()),
            ("/dev/ptmx", node_file.as_path()),
        ] {
            for privileged in [false, true] {
                let whole = dest != "/dev/pts" && src == node.path();
                if privileged && whole && !handler.is_empty() {
                    continue; // below: the node's /dev, whole, under runc
                }
                let mut c = ccfg(&img, "dev", &[], &[]);
                security(&mut c).privileged = privileged;
                c.mounts = vec![bind(src, dest)];
                let e = try_create(&p.h, &pod, &pc, c)
                    .await
                    .expect_err(&format!("{handler:?}: a volume at {dest} must be refused"));
                assert_eq!(e.code(), tonic::Code::InvalidArgument, "{dest}: {e:?}");
                assert!(e.message().contains(dest), "{dest}: {e:?}");
                assert!(e.message().contains("/dev"), "{dest}: {e:?}");
            }
        }
        assert_eq!(
            listing(node.path()),
            before,
            "{handler:?} wrote into the node's dir"
        );
        assert_eq!(container_dirs(&p), 0, "{handler:?}");

        // A privileged container under an OCI handler may have a volume at
        // /dev itself (a storage or device plugin's shape, with the node's
        // /dev): runc makes no device node in it and it has no masked
        // paths; as containerd, none of the runtime's mounts under /dev
        // (tmpfs, mqueue, devpts) but the pod's /dev/shm over it, so a
        // dir shaped like a node's /dev gets nothing written.
        if !handler.is_empty() {
            let devlike = tempfile::tempdir().unwrap();
            let null = devlike.path().join("null");
            let cnull = std::ffi::CString::new(null.display().to_string()).unwrap();
            // SAFETY: mknod(2) of a path the test owns.
            let r =
                unsafe { libc::mknod(cnull.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) };
            assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
            for d in ["pts", "shm", "mqueue"] {
                std::fs::create_dir(devlike.path().join(d)).unwrap();
            }
            let shape = listing(devlike.path());
            for dest in ["/dev", "/volume"] {
                let mut c = ccfg(&img, "wholedev", &[], &[]);
                security(&mut c).privileged = true;
                c.mounts = vec![bind(devlike.path(), dest)];
                let id = create_start(&p.h, &pod, &pc, c).await;
                let out = sh(&p, &id, "ls /dev; stat -f -c '%t' /dev/pts /dev/shm").await;
                // The node's entries, its pts dir as it is (no devpts of
                // the runtime's over it), the pod's shm (tmpfs) over shm.
                let pts_fs = rustix::fs::statfs(devlike.path()).unwrap().f_type;
                let want = format!("mqueue\nnull\npts\nshm\n{pts_fs:x}\n1021994\n");
                assert_eq!(out, want, "{dest}");
                stop_remove(&p.h, &id).await;
                assert_eq!(
                    listing(devlike.path()),
                    shape,
                    "runc wrote into the node's /dev"
                );
            }
        }

        let log = tempfile::NamedTempFile::new().unwrap();
        let mut c = ccfg(&img, "tl", &[], &[]);
        c.mounts = vec![bind(log.path(), "/dev/termination-log")];
        let id = create_start(&p.h, &pod, &pc, c).await;
        let out = sh(
            &p,
            &id,
            "echo bye > /dev/termination-log; stat -c '%t:%T' /dev/null /proc/keys /proc/timer_list; cat /proc/keys",
        )
        .await;
        assert_eq!(out, "1:3\n1:3\n1:3\n", "{handler:?}");
        assert_eq!(std::fs::read_to_string(log.path()).unwrap(), "bye\n");
        stop_remove_pod(&p.h, &pod).await;
    }
}

/// Rounds of a race before giving up on seeing it redirect.
const ROUNDS: usize = 300;
/// Redirected rounds, all contained, after which a race has shown enough.
const ENOUGH: usize = 12;

/// A second container of the same pod flips `/vol/d` of a shared emptyDir
/// (`ln -sfn`, a rename over the link) between a directory and a link to
/// `/dev`, `/dev/pts` or `/proc/sys/kernel`, and swaps what the runtime
/// makes there for links to the container's own `/canary`, while the
/// victim, with the emptyDir at `/vol` and a node directory at `/vol/d`,
/// is created and started again and again. A round is refused (the
/// neighbour removed a mount point under the runtime: it can deny a start,
/// never choose what is mounted) or the container sees genuine devices,
/// masks and procfs; the node's directory never gets anything written;
/// the race must redirect the mount at least once (shown by the
/// container's mountinfo) or the test proves nothing and fails.
#[tokio::test(flavor = "multi_thread")]
async fn a_racing_neighbour_cannot_redirect_mounts_onto_dev_pts_or_proc() {
    if !common::require_root() {
        return;
    }
    let p = pod::setup(vec![]).await;
    let img = canary_image(&p).await;
    for handler in HANDLERS {
        for race in &RACES {
            masks::race(&p, &img, handler, race, ROUNDS, ENOUGH).await;
        }
    }
    assert_eq!(container_dirs(&p), 0);
}
