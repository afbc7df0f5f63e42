//! The spare the server makes ahead for the next pod (an id with a shim
//! running and namespaces pinned) on a real husk serve: its id taken by one
//! pod, made again, gone with the server, undone after a kill.
#![allow(clippy::unwrap_used)]

mod common;

use common::pod::*;
use std::path::Path;
use std::process::Command;

/// The spare, once ready: its id, its shim's pid, and the inode of its
/// network namespace.
struct Ready {
    id: String,
    shim: i32,
    net: u64,
}

fn ino(p: &Path) -> u64 {
    std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap())
}

fn shim_pid(dir: &Path) -> Option<i32> {
    std::fs::read_to_string(dir.join("shim.pid"))
        .ok()?
        .trim()
        .parse()
        .ok()
        .filter(|p| alive(*p))
}

/// Waits for exactly one spare with its three pins and a live shim.
fn wait_spare(p: &Pod) -> Ready {
    let run = p.h.dir.path().join("run");
    for _ in 0..500 {
        if let [id] = spares(p).as_slice() {
            let set = run.join("ns").join(id);
            if let (3, Some(shim)) = (
                common::mounts_under(&set).len(),
                shim_pid(&run.join("s").join(id)),
            ) {
                return Ready {
                    id: id.clone(),
                    shim,
                    net: ino(&set.join("net")),
                };
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!("no spare: {:?}", spares(p));
}

/// One spare is ready; a pod takes its id (the same shim, the same network
/// namespace, the pod's host name set in it); a new one is made; a
/// host-network pod takes the next one's id and shim and its namespaces
/// are removed; the server removes its spare when it stops, and the next
/// server undoes one a killed server left.
#[tokio::test(flavor = "multi_thread")]
async fn a_spare_becomes_one_pod_and_leaves_with_the_server() {
    if !common::require_root() {
        return;
    }
    let mut p = setup(vec![]).await;
    let run_dir = p.h.dir.path().join("run");
    let first = wait_spare(&p);

    let a = run(&p.h, p.config("ahead")).await.unwrap();
    assert_eq!(a, first.id, "the pod took the spare's id");
    let pod_ns = run_dir.join("ns").join(&a);
    assert_eq!(
        ino(&as_pod_sees(&p.h, &a, &pod_ns.join("net"))),
        first.net,
        "and its network namespace"
    );
    assert_eq!(mounts_as_pod_sees(&p.h, &a, &pod_ns).len(), 3);
    assert_eq!(
        shim_pid(&run_dir.join("s").join(&a)),
        Some(first.shim),
        "and its shim"
    );
    assert_eq!(shims_for(&run_dir.join("s").join(&a)), 1);
    let pid = pause_pid(&status(&p.h, &a).await.unwrap());
    let hn = Command::new("nsenter")
        .args(["-t", &pid.to_string(), "-u", "hostname"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&hn.stdout).trim(), "ahead");

    let second = wait_spare(&p);
    assert_ne!(second.id, a);
    assert_ne!(second.net, first.net);
    assert_ne!(second.shim, first.shim);

    // The node's network: the spare's id and shim, not its namespaces.
    let mut c = p.config("hostnet");
    host_network(&mut c);
    let b = run(&p.h, c).await.unwrap();
    assert_eq!(b, second.id);
    assert_eq!(shim_pid(&run_dir.join("s").join(&b)), Some(second.shim));
    let pins = mounts_as_pod_sees(&p.h, &b, &run_dir.join("ns").join(&b));
    assert_eq!(pins.len(), 1, "only its own IPC namespace: {pins:?}");
    let pause = pause_pid(&status(&p.h, &b).await.unwrap());
    assert_eq!(
        std::fs::read_link(format!("/proc/{pause}/ns/net")).unwrap(),
        std::fs::read_link("/proc/self/ns/net").unwrap(),
    );

    // Stopped: the spare is gone. Killed: the next server undoes it and
    // makes one of its own.
    let third = wait_spare(&p);
    assert!(p.h.terminate().success());
    assert_eq!(spares(&p), Vec::<String>::new());
    assert!(common::mounts_under(&run_dir.join("ns").join(&third.id)).is_empty());
    assert!(!alive(third.shim));
    assert!(alive(first.shim), "a pod's shim outlives the server");
    p.h.spawn().await;
    let left = wait_spare(&p);
    p.h.restart().await;
    let made = wait_spare(&p);
    assert_ne!(made.id, left.id);
    assert!(!run_dir.join("ns").join(&left.id).exists());
    assert!(!run_dir.join("s").join(&left.id).exists());
    assert!(!alive(left.shim));
    assert!(alive(first.shim) && alive(second.shim));

    remove_listed(&p).await;
    assert_eq!(leftovers(&p), Vec::<String>::new());
}
