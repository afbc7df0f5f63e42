//! A `hostUsers: false` pod through a real `husk serve`: the pause, its
//! containers and their execs share one user namespace with the pod's
//! mappings; image files and idmapped volumes show the pod's owners; the
//! pod's root is not the node's root (the security tests); Status says so
//! only where the node can idmap, and elsewhere the pod is refused with
//! the filesystem named. Nothing is left after the pod is removed.
#![allow(clippy::unwrap_used)]

mod common;

use common::ctr::{app_image, ccfg, create_start, pod_config, stop_remove_pod, try_create};
use common::pod::*;
use common::userns::*;
use husk::api::cri::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

/// The pod's ids on the node: 65536 of them, as the kubelet allocates.
const HOST: u32 = 65536 * 5;

fn pod_map() -> Vec<IdMapping> {
    vec![map(0, HOST, 65536)]
}

async fn sh(p: &Pod, id: &str, script: &str) -> (i32, String) {
    let out =
        p.h.runtime()
            .await
            .exec_sync(ExecSyncRequest {
                container_id: id.into(),
                cmd: vec!["sh".into(), "-c".into(), script.into()],
                timeout: 20,
            })
            .await
            .unwrap()
            .into_inner();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.exit_code, text.trim().to_string())
}

fn ns_inode(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().ino()
}

fn mount(container_path: &str, host: &Path, idmapped: bool) -> Mount {
    Mount {
        container_path: container_path.into(),
        host_path: host.display().to_string(),
        uid_mappings: if idmapped { pod_map() } else { vec![] },
        gid_mappings: if idmapped { pod_map() } else { vec![] },
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hostusers_false_pod_runs_in_its_own_user_namespace() {
    if !common::require_root() {
        return;
    }
    // Where the pods' mounts live is named: the node's namespace here.
    own_user_namespace(vec!["--mount-namespace".into(), "node".into()]).await;
}

/// The same with each pod's mounts in its monitor's own namespace: the
/// pod's pins, its user namespace's with the others, are there, and its
/// processes join them at their own paths.
#[tokio::test(flavor = "multi_thread")]
async fn a_hostusers_false_pod_runs_with_its_mounts_in_its_own_namespace() {
    if !common::require_root() {
        return;
    }
    own_user_namespace(vec!["--mount-namespace".into(), "pod".into()]).await;
}

async fn own_user_namespace(args: Vec<String>) {
    let p = setup_with(vec![], "/usr/lib/cni", args).await;
    let image = app_image(&p).await;
    let support = husk::idmap::Support::probe(&p.h.root());
    let advertised = p.h.runtime_status().await.runtime_handlers[0]
        .features
        .as_ref()
        .unwrap()
        .user_namespaces;
    assert_eq!(
        advertised,
        support.pods(),
        "Status follows what the node can idmap"
    );

    let pc = with_userns(
        pod_config(&p, "userns-pod"),
        userns(NamespaceMode::Pod, pod_map(), pod_map()),
    );
    if let Err(why) = &support.root {
        // The node cannot idmap the image layers: refused with the
        // filesystem named, nothing left.
        let st = run(&p.h, pc).await.unwrap_err();
        assert_eq!(st.code(), tonic::Code::FailedPrecondition, "{st:?}");
        assert!(st.message().contains("idmapped"), "{st:?} ({why})");
        assert_eq!(leftovers(&p), Vec::<String>::new());
        eprintln!("skipped the running pod: {why}");
        return;
    }
    // The pod's root is an unprivileged user of the node: husk's
    // directories must be searchable by it, or the pod is refused with the
    // one that is not named, and nothing is left.
    let mode = |m: u32| std::fs::Permissions::from_mode(m);
    std::fs::set_permissions(p.h.dir.path(), mode(0o700)).unwrap();
    let st = run(&p.h, pc.clone()).await.unwrap_err();
    std::fs::set_permissions(p.h.dir.path(), mode(0o755)).unwrap();
    assert_eq!(st.code(), tonic::Code::FailedPrecondition, "{st:?}");
    assert!(st.message().contains("cannot search"), "{st:?}");
    assert!(
        st.message().contains(&p.h.dir.path().display().to_string()),
        "{st:?}"
    );
    assert_eq!(leftovers(&p), Vec::<String>::new());

    let pod = run(&p.h, pc.clone()).await.unwrap();

    // The node's files: a plain hostPath with a secret only node root may
    // read, and a volume the kubelet sends idmapped.
    let vols = p.h.dir.path().join("vols");
    let (plain, mapped) = (vols.join("plain"), vols.join("mapped"));
    // The plain one is writable by all (as /tmp is), so that what the
    // pod writes there shows whose it is.
    for (d, mode) in [(&plain, 0o1777), (&mapped, 0o755)] {
        std::fs::create_dir_all(d).unwrap();
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    std::fs::write(plain.join("secret"), "node only").unwrap();
    std::fs::set_permissions(plain.join("secret"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(mapped.join("f"), "root's").unwrap();

    let mut c = ccfg(&image, "c", &["/bin/sleep", "600"], &[]);
    c.mounts = vec![
        mount("/plain", &plain, false),
        mount("/mapped", &mapped, true),
        mount("/hostkernel", Path::new("/proc/sys/kernel"), false),
    ];
    container_userns(&mut c, userns(NamespaceMode::Pod, pod_map(), pod_map()));
    let id = create_start(&p.h, &pod, &pc, c.clone()).await;

    // The mapping, for the container and for an exec in it.
    let (code, out) = sh(&p, &id, "cat /proc/self/uid_map /proc/self/gid_map; id -u").await;
    assert_eq!(code, 0, "{out}");
    let words: Vec<&str> = out.split_whitespace().collect();
    let h = HOST.to_string();
    assert_eq!(words, ["0", &h, "65536", "0", &h, "65536", "0"], "{out}");
    // One user namespace: the pin, the pause and the exec.
    let pin = as_pod_sees(
        &p.h,
        &pod,
        &p.h.dir.path().join("run/ns").join(&pod).join("user"),
    );
    let st = status(&p.h, &pod).await.unwrap();
    let pause = pause_pid(&st);
    assert_eq!(
        ns_inode(&pin),
        ns_inode(Path::new(&format!("/proc/{pause}/ns/user")))
    );
    let (_, link) = sh(&p, &id, "readlink /proc/self/ns/user").await;
    assert_eq!(link, format!("user:[{}]", ns_inode(&pin)));
    assert_ne!(ns_inode(&pin), ns_inode(Path::new("/proc/self/ns/user")));

    // The image's files and the pod's own files are the pod root's.
    let (_, owners) = sh(&p, &id, "stat -c %u:%g /bin/busybox /etc/hosts /").await;
    assert_eq!(
        owners.split_whitespace().collect::<Vec<_>>(),
        ["0:0"; 3],
        "{owners}"
    );
    let (code, out) = sh(&p, &id, "echo x > /new-in-root && echo y > /etc/new-in-etc").await;
    assert_eq!(code, 0, "the pod's root writes its rootfs: {out}");

    // An idmapped volume: root's file is the pod root's, and what the pod
    // root writes is root's on the node.
    let (code, out) = sh(&p, &id, "stat -c %u /mapped/f && echo z > /mapped/by-pod").await;
    assert_eq!((code, out.as_str()), (0, "0"));
    assert_eq!(std::fs::metadata(mapped.join("by-pod")).unwrap().uid(), 0);

    // The security tests: the pod's root is not the node's.
    // A file it makes in a hostPath is owned by its host id.
    let (code, out) = sh(&p, &id, "echo z > /plain/by-pod").await;
    assert_eq!(code, 0, "{out}");
    let md = std::fs::metadata(plain.join("by-pod")).unwrap();
    assert_eq!((md.uid(), md.gid()), (HOST, HOST));
    // It cannot read the node root's file through a volume it does not own.
    let (code, out) = sh(&p, &id, "cat /plain/secret").await;
    assert_ne!(code, 0, "read the node's secret: {out}");
    assert!(out.contains("Permission denied"), "{out}");
    // It cannot write the node's sysctls, even through a writable mount.
    let (code, out) = sh(
        &p,
        &id,
        "cat /hostkernel/printk_ratelimit > /tmp/v && cat /tmp/v > /hostkernel/printk_ratelimit",
    )
    .await;
    assert_ne!(code, 0, "wrote a node sysctl: {out}");
    // It cannot make a device node (node root with CAP_MKNOD could).
    let (code, out) = sh(&p, &id, "mknod /tmp/mem c 1 1").await;
    assert_ne!(code, 0, "made a device: {out}");
    assert!(!out.is_empty());
    // It cannot load a kernel module: CAP_SYS_MODULE is not among its
    // capabilities, and would be void outside its namespace anyway.
    let (_, caps) = sh(&p, &id, "grep CapBnd /proc/self/status").await;
    let bnd = u64::from_str_radix(caps.split_whitespace().nth(1).unwrap(), 16).unwrap();
    assert_eq!(bnd & (1 << 16), 0, "{caps}");
    // An exec has the container's capabilities (the defaults, as the
    // pause in pid 1 has them), not all that entering the user namespace
    // gave it.
    let (_, caps) = sh(
        &p,
        &id,
        "grep -h -E '^Cap(Eff|Bnd)' /proc/1/status /proc/self/status | cut -f2",
    )
    .await;
    let v: Vec<&str> = caps.lines().collect();
    assert_eq!(v.len(), 4, "{caps}");
    assert_eq!(
        v[3], v[1],
        "the exec's bounding set is the container's: {caps}"
    );
    assert_eq!(
        v[2], v[3],
        "a root exec has its bounding set effective: {caps}"
    );
    assert_ne!(v[3], "000001ffffffffff", "{caps}");

    // A container of another user: its processes and execs are that user
    // inside, the pod's host id outside.
    let mut u = ccfg(&image, "u", &["/bin/sleep", "600"], &[]);
    common::ctr::security(&mut u).run_as_user = Some(Int64Value { value: 1000 });
    u.mounts = vec![mount("/plain", &plain, false)];
    container_userns(&mut u, userns(NamespaceMode::Pod, pod_map(), pod_map()));
    let uid = create_start(&p.h, &pod, &pc, u).await;
    let (code, out) = sh(&p, &uid, "id -u; touch /tmp/x && stat -c %u /tmp/x").await;
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out.split_whitespace().collect::<Vec<_>>(),
        ["1000"; 2],
        "{out}"
    );
    let (code, out) = sh(&p, &uid, "touch /plain/by-1000").await;
    assert_eq!(code, 0, "{out}");
    let md = std::fs::metadata(plain.join("by-1000")).unwrap();
    // No runAsGroup and no such user in the image: group 0, the pod's.
    assert_eq!((md.uid(), md.gid()), (HOST + 1000, HOST));

    // A container whose options or mount mappings are not the pod's is
    // refused, and nothing of it is made.
    let mut other = ccfg(&image, "c2", &["/bin/sleep", "600"], &[]);
    container_userns(
        &mut other,
        userns(
            NamespaceMode::Pod,
            vec![map(0, HOST + 65536, 65536)],
            pod_map(),
        ),
    );
    let st = try_create(&p.h, &pod, &pc, other.clone())
        .await
        .unwrap_err();
    assert_eq!(st.code(), tonic::Code::InvalidArgument, "{st:?}");
    container_userns(&mut other, userns(NamespaceMode::Node, vec![], vec![]));
    let st = try_create(&p.h, &pod, &pc, other.clone())
        .await
        .unwrap_err();
    assert_eq!(st.code(), tonic::Code::InvalidArgument, "{st:?}");
    container_userns(&mut other, userns(NamespaceMode::Pod, pod_map(), pod_map()));
    let mut wrong = mount("/mapped", &mapped, true);
    wrong.uid_mappings = vec![map(0, 1000, 65536)];
    other.mounts = vec![wrong];
    let st = try_create(&p.h, &pod, &pc, other).await.unwrap_err();
    assert_eq!(st.code(), tonic::Code::InvalidArgument, "{st:?}");
    assert!(st.message().contains("must be the pod's"), "{st:?}");
    assert_eq!(list_containers(&p).await.len(), 2);

    stop_remove_pod(&p.h, &pod).await;
    assert_eq!(leftovers(&p), Vec::<String>::new());
    assert!(!pin.exists());
}
