//! What the server makes ahead for the next pod (a set of namespaces and
//! a shim) on a real husk serve: taken by one pod, made again, gone with
//! the server, swept after a kill.
#![allow(clippy::unwrap_used)]

mod common;

use common::pod::*;
use std::path::Path;
use std::process::Command;

/// What the server makes ahead for the next pod: one set of namespaces,
/// taken whole by a pod (moved, not copied: the same network namespace;
/// the pod's host name set in it), and one shim, taken by the pod (the
/// same process, now naming the pod's dir); both made again, removed when
/// the server stops, and swept by the next server after a kill.
#[tokio::test(flavor = "multi_thread")]
async fn namespaces_and_shim_made_ahead_go_to_one_pod_and_leave_with_the_server() {
    if !common::require_root() {
        return;
    }
    let mut p = setup(vec![]).await;
    let spare = p.h.dir.path().join("run/spare-ns");
    let one_set = |spare: &Path| -> Option<std::path::PathBuf> {
        let sets: Vec<_> = std::fs::read_dir(spare).ok()?.flatten().collect();
        let pins = common::mounts_under(spare);
        (sets.len() == 1 && pins.len() == 3).then(|| sets[0].path())
    };
    let wait_set = |spare: &Path| {
        for _ in 0..500 {
            if let Some(s) = one_set(spare) {
                return s;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        panic!(
            "no set of namespaces made ahead: {:?}",
            common::mounts_under(spare)
        );
    };
    let set = wait_set(&spare);
    let ino = |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
    let net = ino(&set.join("net"));
    let ahead = p.h.dir.path().join("run/spare-shim");
    let wait_shim = |ahead: &Path| -> i32 {
        for _ in 0..500 {
            let pid = std::fs::read_dir(ahead).ok().and_then(|mut d| {
                let e = d.next()?.ok()?;
                std::fs::read_to_string(e.path().join("shim.pid"))
                    .ok()?
                    .trim()
                    .parse()
                    .ok()
            });
            if let Some(pid) = pid.filter(|p| alive(*p)) {
                return pid;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        panic!("no shim started ahead");
    };
    let shim = wait_shim(&ahead);
    assert_eq!(shims_for(&ahead), 1);

    let a = run(&p.h, p.config("ahead")).await.unwrap();
    let pod_ns = p.h.dir.path().join("run/ns").join(&a);
    assert_eq!(
        ino(&pod_ns.join("net")),
        net,
        "the pod took the set made ahead"
    );
    assert_eq!(common::mounts_under(&pod_ns).len(), 3);
    let pid = pause_pid(&status(&p.h, &a).await.unwrap());
    let hn = Command::new("nsenter")
        .args(["-t", &pid.to_string(), "-u", "hostname"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&hn.stdout).trim(), "ahead");
    let next = wait_set(&spare);
    assert_ne!(next, set);
    assert_ne!(ino(&next.join("net")), net);
    // The pod's shim is the one started ahead, and says so on its command
    // line; another one was started.
    let pod_shim = p.h.dir.path().join("run/s").join(&a);
    let pid: i32 = std::fs::read_to_string(pod_shim.join("shim.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(pid, shim);
    assert_eq!(shims_for(&pod_shim), 1);
    let again = wait_shim(&ahead);
    assert_ne!(again, shim);
    assert_eq!(shims_for(&ahead), 1);

    // Stopped: the set is gone. Killed: the next server removes it and
    // makes one set of its own.
    assert!(p.h.terminate().success());
    assert!(common::mounts_under(&spare).is_empty());
    assert_eq!(std::fs::read_dir(&spare).unwrap().count(), 0);
    assert!(!alive(again));
    assert_eq!(std::fs::read_dir(&ahead).unwrap().count(), 0);
    assert!(alive(pid), "the pod's shim outlives the server");
    p.h.spawn().await;
    let left = wait_set(&spare);
    let left_shim = wait_shim(&ahead);
    p.h.restart().await;
    let made = wait_set(&spare);
    assert_ne!(made, left);
    assert!(!left.exists());
    assert_ne!(wait_shim(&ahead), left_shim);
    assert!(!alive(left_shim));
    assert!(alive(pid));

    remove_listed(&p).await;
    assert_eq!(leftovers(&p), Vec::<String>::new());
}
