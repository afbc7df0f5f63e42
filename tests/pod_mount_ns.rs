//! `mount_namespace = "pod"` on a real husk serve: each pod's mounts (its
//! namespace pins, its /dev/shm, its pause's and its containers' rootfs)
//! live in its monitor's mount namespace and none in the node's; a volume
//! the node mounts after the pod started still reaches its containers as
//! the node sees it; on a node that shares its mounts, a pod's namespace
//! is their peer (a container's Bidirectional volume reaches the node)
//! while nothing under the server's dirs propagates, either way; a log
//! goes where the node sees its directory; a failure and a
//! removal leave nothing, on the node or in the monitors.
#![allow(clippy::unwrap_used)]

mod common;

use common::ctr::*;
use common::pod::*;
use husk::api::cri::*;
use std::path::Path;

fn pod_mode() -> Vec<String> {
    vec!["--mount-namespace".into(), "pod".into()]
}

/// The node's own mounts under the server's dirs, the spare's pins aside
/// (a spare's namespaces are made on the node, and handed to the pod that
/// takes them).
fn node_mounts(p: &Pod) -> Vec<String> {
    let d = p.h.dir.path();
    let spare: Vec<std::path::PathBuf> = spares(p)
        .iter()
        .map(|id| d.join("run/ns").join(id))
        .collect();
    common::mounts_under(d)
        .into_iter()
        .filter(|m| !servers_own(d, m) && !spare.iter().any(|s| Path::new(m).starts_with(s)))
        .collect()
}

/// A tmpfs of the test's own at `dir`, `shared` or private.
fn tmpfs(dir: &Path, shared: bool) {
    let flag = if shared {
        "--make-shared"
    } else {
        "--make-private"
    };
    let ok = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "pmn-test"])
        .arg(dir)
        .status()
        .unwrap()
        .success()
        && std::process::Command::new("mount")
            .arg(flag)
            .arg(dir)
            .status()
            .unwrap()
            .success();
    assert!(ok, "mount a tmpfs at {}", dir.display());
}

fn umount(dir: &Path) {
    std::process::Command::new("umount")
        .arg("-l")
        .arg(dir)
        .status()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pods_mounts_are_its_monitors_alone() {
    if !common::require_root() {
        return;
    }
    let p = setup_with(vec![], "/usr/lib/cni", pod_mode()).await;
    let h = &p.h;
    let image = app_image(&p).await;
    // One PID namespace for the pod: it has a pause, whose rootfs is the
    // pod's to hold too.
    let mut pc = pod_config(&p, "pmn");
    let sc = pc.linux.as_mut().unwrap();
    let sc = sc.security_context.get_or_insert_with(Default::default);
    sc.namespace_options
        .get_or_insert_with(Default::default)
        .pid = NamespaceMode::Pod as i32;
    let pod = run(h, pc.clone()).await.unwrap();
    let st = status(h, &pod).await.unwrap();
    assert!(pause_pid(&st) > 0);
    let ip = st.status.unwrap().network.unwrap().ip;
    assert!(
        !ip.is_empty(),
        "the pod has an address from its pinned netns"
    );

    // A volume the node mounts once the pod runs, as a kubelet mounts a
    // secret: this node's root is not shared, so only a bind made for the
    // pod brings it in.
    let vol = tempfile::tempdir().unwrap();
    tmpfs(vol.path(), false);
    std::fs::write(vol.path().join("token"), "secret").unwrap();
    let mut c = ccfg(&image, "app", &[], &[]);
    c.mounts.push(Mount {
        container_path: "/vol".into(),
        host_path: vol.path().display().to_string(),
        ..Default::default()
    });
    let id = create_start(h, &pod, &pc, c).await;
    let r = exec_sync(h, &id, &["cat", "/vol/token"]).await.unwrap();
    assert_eq!(String::from_utf8_lossy(&r.stdout), "secret");
    let r = exec_sync(h, &id, &["grep", " /dev/shm ", "/proc/mounts"])
        .await
        .unwrap();
    assert!(
        String::from_utf8_lossy(&r.stdout).contains("tmpfs"),
        "{:?}",
        String::from_utf8_lossy(&r.stdout)
    );

    // None of it is the node's; all of it is the monitor's.
    assert_eq!(node_mounts(&p), Vec::<String>::new());
    let mon = shim_pid(h, &pod);
    let d = h.dir.path();
    let theirs = mounts_of(mon, d);
    for want in [
        d.join("run/ns").join(&pod).join("net"),
        d.join("run/ns").join(&pod).join("uts"),
        d.join("run/ns").join(&pod).join("ipc"),
        d.join("root/sandboxes").join(&pod).join("shm"),
        d.join("root/sandboxes").join(&pod).join("bundle/rootfs"),
        d.join("root/containers").join(&id).join("rootfs"),
        d.join("root/containers").join(&id).join("binds/0"),
    ] {
        let want = want.display().to_string();
        assert!(theirs.contains(&want), "{want} not in {theirs:?}");
    }
    // Another pod's monitor holds nothing of this one.
    let other = run(h, pod_config(&p, "pmn-other")).await.unwrap();
    let other_mon = shim_pid(h, &other);
    assert!(
        !mounts_of(other_mon, d)
            .iter()
            .any(|m| m.contains(&pod) || m.contains(&id)),
        "{:?}",
        mounts_of(other_mon, d)
    );

    // A removed container's rootfs leaves the pod's namespace at once.
    stop_remove(h, &id).await;
    let left = mounts_of(mon, d);
    assert!(!left.iter().any(|m| m.contains(&id)), "{left:?}");
    stop_remove_pod(h, &pod).await;
    stop_remove_pod(h, &other).await;
    umount(vol.path());
    assert_eq!(leftovers(&p), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_pod_leaves_nothing_in_any_namespace() {
    if !common::require_root() {
        return;
    }
    // A CNI plugin that fails after bridge attached the pod through the
    // pin already handed to its monitor.
    let p = setup_with(
        vec![serde_json::json!({"type": "no-such-plugin"})],
        "/usr/lib/cni",
        pod_mode(),
    )
    .await;
    let e = run(&p.h, p.config("pmn-fails")).await.unwrap_err();
    assert!(e.message().contains("no-such-plugin"), "{}", e.message());
    assert_eq!(leftovers(&p), Vec::<String>::new());
    // The name was released, the network undone: a good run works.
    p.net.write(&p.h.dir.path().join("net.d"), vec![]);
    let id = run(&p.h, p.config("pmn-fails")).await.unwrap();
    assert_eq!(node_mounts(&p), Vec::<String>::new());
    stop_remove_pod(&p.h, &id).await;
    assert_eq!(leftovers(&p), Vec::<String>::new());
}

/// A log directory the node mounts after the pod started: the container's
/// log is written where the node sees it, not under that mount.
#[tokio::test(flavor = "multi_thread")]
async fn a_log_goes_where_the_node_sees_its_directory() {
    if !common::require_root() {
        return;
    }
    let p = setup_with(vec![], "/usr/lib/cni", pod_mode()).await;
    let image = app_image(&p).await;
    let logs = p.h.dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let mut pc = pod_config(&p, "pmn-logs");
    pc.log_directory = logs.display().to_string();
    let pod = run(&p.h, pc.clone()).await.unwrap();
    tmpfs(&logs, false);
    let mut c = ccfg(&image, "talks", &[], &["echo said-on-the-node; sleep 600"]);
    c.log_path = "talks/0.log".into();
    let id = create_start(&p.h, &pod, &pc, c).await;
    let log = logs.join("talks/0.log");
    let mut text = String::new();
    for _ in 0..100 {
        text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("said-on-the-node") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(
        text.contains("said-on-the-node"),
        "{}: {text:?}",
        log.display()
    );
    stop_remove(&p.h, &id).await;
    stop_remove_pod(&p.h, &pod).await;
    umount(&logs);
    assert_eq!(leftovers(&p), Vec::<String>::new());
}

/// A node whose mounts are shared, as systemd shares them on a real node:
/// the server's root is under a shared tmpfs of the test's own, and a
/// process in a mount namespace that is its peer (as another service's)
/// stands for the rest of the node.
#[tokio::test(flavor = "multi_thread")]
async fn on_a_node_that_shares_its_mounts_a_pods_stay_its_own() {
    if !common::require_root() {
        return;
    }
    let node = tempfile::tempdir().unwrap();
    let n = node.path().to_path_buf();
    tmpfs(&n, true);
    let peer = std::process::Command::new("unshare")
        .args(["-m", "--propagation", "unchanged", "sleep", "600"])
        .spawn()
        .unwrap();
    let undo = Undo(n.clone(), peer);
    let vol = n.join("vol");
    std::fs::create_dir_all(vol.join("sub")).unwrap();
    let root = n.join("root");
    let mut args = pod_mode();
    args.extend(["--root".to_string(), root.display().to_string()]);
    let p = setup_with(vec![], "/usr/lib/cni", args).await;
    let h = &p.h;
    let image = app_image(&p).await;
    let pc = pod_config(&p, "pmn-shared");
    let pod = run(h, pc.clone()).await.unwrap();
    let mut c = ccfg(&image, "bidi", &[], &[]);
    security(&mut c).privileged = true;
    c.mounts.push(Mount {
        container_path: "/vol".into(),
        host_path: vol.display().to_string(),
        propagation: MountPropagation::PropagationBidirectional as i32,
        ..Default::default()
    });
    let id = create_start(h, &pod, &pc, c).await;
    let other = run(h, pod_config(&p, "pmn-shared-other")).await.unwrap();

    // The pod's rootfs and shm are its monitor's; on the node, and in the
    // peer, under the root there is only the root's own private bind.
    let mon = shim_pid(h, &pod);
    let theirs = mounts_of(mon, &root);
    for want in [
        root.join("sandboxes").join(&pod).join("shm"),
        root.join("containers").join(&id).join("rootfs"),
    ] {
        let want = want.display().to_string();
        assert!(theirs.contains(&want), "{want} not in {theirs:?}");
    }
    let only_root = vec![root.display().to_string()];
    assert_eq!(common::mounts_under(&root), only_root);
    let peer_pid = undo.1.id();
    assert_eq!(mounts_of(peer_pid, &root), only_root);
    assert!(
        !mounts_of(shim_pid(h, &other), &root)
            .iter()
            .any(|m| m.contains(&pod) || m.contains(&id)),
        "{:?}",
        mounts_of(shim_pid(h, &other), &root)
    );

    // What the container mounts on its Bidirectional volume reaches the
    // node and the node's peers; what the node mounts there reaches it.
    let r = exec_sync(h, &id, &["mount", "-t", "tmpfs", "from-pod", "/vol/sub"])
        .await
        .unwrap();
    assert_eq!(r.exit_code, 0, "{}", String::from_utf8_lossy(&r.stderr));
    let sub = vol.join("sub").display().to_string();
    assert!(common::mounts_under(&vol).contains(&sub));
    assert!(mounts_of(peer_pid, &vol).contains(&sub));
    umount(&vol.join("sub"));
    let r = exec_sync(h, &id, &["grep", " /vol/sub ", "/proc/mounts"])
        .await
        .unwrap();
    assert_eq!(r.exit_code, 1, "the node's unmount reached the container");

    stop_remove_pod(h, &pod).await;
    stop_remove_pod(h, &other).await;
    assert_eq!(leftovers(&p), Vec::<String>::new());
    assert_eq!(common::mounts_under(&root), only_root);
    assert_eq!(mounts_of(peer_pid, &root), only_root);
    drop(p);
}

/// The shared tmpfs and its peer process, undone however the test ends
/// (after the server is gone: it is dropped first).
struct Undo(std::path::PathBuf, std::process::Child);
impl Drop for Undo {
    fn drop(&mut self) {
        let _ = self.1.kill();
        let _ = self.1.wait();
        let _ = std::process::Command::new("umount")
            .args(["-R", "-l"])
            .arg(&self.0)
            .status();
    }
}

/// A node switched from `"node"` to `"pod"` while a pod made in the node's
/// namespace still holds its mounts (its server killed): the new server
/// refuses to start, naming them, and binds nothing over them; served
/// with the old setting again, the pod is removed; then `"pod"` starts,
/// and nothing is left.
#[tokio::test(flavor = "multi_thread")]
async fn switching_to_pod_mode_waits_for_the_node_namespaces_pods() {
    if !common::require_root() {
        return;
    }
    let node_mode: Vec<String> = vec!["--mount-namespace".into(), "node".into()];
    let mut p = setup_with(vec![], "/usr/lib/cni", node_mode.clone()).await;
    let pod = run(&p.h, p.config("pmn-switch")).await.unwrap();
    p.h.kill9();
    let before = common::mounts_under(p.h.dir.path());
    assert!(!before.is_empty());

    p.h.extra = pod_mode();
    let mut c = p.h.command();
    let mut child = c
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("husk serve in pod mode started over the node's pods");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success(), "{err}");
    assert!(
        err.contains("are in the node's mount namespace")
            && err.contains(&p.h.dir.path().display().to_string()),
        "{err}"
    );
    // Nothing bound over them: the same mounts, none at root or state.
    assert_eq!(common::mounts_under(p.h.dir.path()), before);

    p.h.extra = node_mode;
    p.h.spawn().await;
    stop_remove_pod(&p.h, &pod).await;
    assert!(p.h.terminate().success());
    p.h.extra = pod_mode();
    p.h.spawn().await;
    let again = run(&p.h, p.config("pmn-switch")).await.unwrap();
    assert_eq!(node_mounts(&p), Vec::<String>::new());
    stop_remove_pod(&p.h, &again).await;
    assert_eq!(leftovers(&p), Vec::<String>::new());
    // A clean stop leaves no mount of the server's on the node, its root's
    // and state's binds onto themselves included.
    assert!(p.h.terminate().success());
    assert_eq!(common::mounts_under(p.h.dir.path()), Vec::<String>::new());
}
