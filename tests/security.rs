//! Hostile images and pod specs against a real husk serve, one test per
//! runtime CVE class (README, "Security"): what each attack observes is
//! asserted, not the defence that stops it.
#![allow(clippy::unwrap_used)]

mod common;

use common::ctr::{attack_image as image, *};
use common::images::*;
use common::pod::{self, Pod};
use husk::api::cri::*;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A host-network pod (the attacks need no network of their own).
async fn host_pod(p: &Pod, name: &str) -> (String, PodSandboxConfig) {
    let mut pc = pod_config(p, name);
    pod::host_network(&mut pc);
    let id = pod::run(&p.h, pc.clone()).await.unwrap();
    (id, pc)
}

async fn exec(p: &Pod, id: &str, cmd: &[&str]) -> ExecSyncResponse {
    exec_sync(&p.h, id, cmd).await.unwrap()
}

/// A line of /proc/self/status as the container's process sees it.
fn status_line(status: &str, key: &str) -> String {
    status
        .lines()
        .find(|l| l.starts_with(&format!("{key}:")))
        .unwrap_or_else(|| panic!("no {key} in {status}"))
        .split_once(':')
        .unwrap()
        .1
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

fn invalid(r: Result<String, tonic::Status>, want: &[&str]) -> String {
    let e = r.expect_err("an attack must be refused");
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    for w in want {
        assert!(e.message().contains(w), "{:?} lacks {w:?}", e.message());
    }
    e.message().to_string()
}

fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status_line(&s, "VmRSS")
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// Restarts the pod's server as if started from a shell with
/// supplementary groups 4, 27 and 100 and inheritable (and one ambient)
/// capabilities: what it must not hand down to containers.
async fn restart_from_a_rich_shell(p: &mut Pod) {
    use std::os::unix::process::CommandExt;
    p.h.terminate();
    let log = std::fs::OpenOptions::new()
        .append(true)
        .open(p.h.dir.path().join("husk.log"))
        .unwrap();
    let mut cmd = p.h.command();
    // SAFETY: only async-signal-safe syscalls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let groups: [libc::gid_t; 3] = [4, 27, 100];
            if libc::setgroups(3, groups.as_ptr()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // CAP_NET_ADMIN (12) and CAP_SYS_ADMIN (21) inheritable, then
            // CAP_NET_ADMIN ambient.
            let hdr = [0x2008_0522u32, 0];
            let mut data = [0u32; 6];
            if libc::syscall(libc::SYS_capget, hdr.as_ptr(), data.as_mut_ptr()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            data[2] |= (1 << 12) | (1 << 21);
            if libc::syscall(libc::SYS_capset, hdr.as_ptr(), data.as_ptr()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_RAISE, 12, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .stdin(std::process::Stdio::null())
        .spawn()
        .unwrap();
    p.h.child = Some(child);
    p.h.wait_ready().await;
    let st = std::fs::read_to_string(format!("/proc/{}/status", p.h.pid())).unwrap();
    // The server drops them at once: its shims cannot hand them down.
    assert_eq!(status_line(&st, "Groups"), "", "the server's groups");
    assert_eq!(status_line(&st, "CapInh"), "0000000000000000");
    assert_eq!(status_line(&st, "CapAmb"), "0000000000000000");
    let shim = std::process::Command::new("pgrep")
        .args([
            "-f",
            &format!("husk shim --dir {}", p.h.dir.path().display()),
        ])
        .output()
        .unwrap();
    for pid in String::from_utf8_lossy(&shim.stdout).split_whitespace() {
        let st = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        if !st.is_empty() {
            assert_eq!(status_line(&st, "Groups"), "", "shim {pid}");
            assert_eq!(status_line(&st, "CapInh"), "0000000000000000", "shim {pid}");
        }
    }
}

/// CVE-2024-40635: a uid or gid beyond 2^31-1 (the kernel reads
/// 4294967295 as "unchanged", so the container would stay root), whether
/// as a number, a number looked up as a name, a gid, or run_as_user.
#[tokio::test(flavor = "multi_thread")]
async fn ids_beyond_31_bits_are_refused() {
    if !common::require_root() {
        return;
    }
    let p = pod::setup(vec![]).await;
    let (pod, pc) = host_pod(&p, "ids").await;
    let root_named = Entry::File(
        "etc/passwd".into(),
        b"root:x:0:0:root:/root:/bin/sh\n4294967296:x:0:0::/:/bin/sh\n".to_vec(),
        0o644,
    );
    let cases = [
        ("max", "4294967295", vec![]),
        ("big", "2147483648", vec![]),
        ("named", "4294967296", vec![root_named]),
        ("gid", "65534:4294967295", vec![]),
    ];
    for (name, user, extra) in cases {
        let img = image(&p, name, extra, serde_json::json!({"User": user})).await;
        // ImageStatus never reports it as a uid the kubelet could take
        // for non-root.
        let st = p.h.status(&img).await.unwrap();
        let uid = user.split(':').next().unwrap();
        if uid.parse::<u32>().is_ok_and(|u| u > i32::MAX as u32) {
            assert_eq!(st.uid, None, "{user}: reported as a uid");
            assert_eq!(st.username, uid);
        }
        let m = invalid(
            try_create(&p.h, &pod, &pc, ccfg(&img, name, &[], &[])).await,
            &["out of range", &format!("{user:?}")],
        );
        assert!(m.contains("User"), "{m}");
    }
    let img = image(&p, "plain", vec![], serde_json::json!({})).await;
    for (uid, what) in [
        (4294967295i64, "run_as_user 4294967295"),
        (-1, "run_as_user -1"),
    ] {
        let mut c = ccfg(&img, "rau", &[], &[]);
        security(&mut c).run_as_user = Some(Int64Value { value: uid });
        invalid(
            try_create(&p.h, &pod, &pc, c).await,
            &[what, "out of range"],
        );
    }
    assert_eq!(container_dirs(&p), 0, "a refused create leaves nothing");
    // The pod's own (its pause runs as it).
    for uid in [-1i64, 4294967295] {
        let mut c = pod_config(&p, "badpod");
        pod::host_network(&mut c);
        c.linux
            .as_mut()
            .unwrap()
            .security_context
            .as_mut()
            .unwrap()
            .run_as_user = Some(Int64Value { value: uid });
        let e = pod::run(&p.h, c).await.expect_err("a pod running as -1");
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains("run_as_user"), "{e:?}");
    }
    // The largest allowed id runs as itself.
    let mut c = ccfg(&img, "edge", &[], &[]);
    security(&mut c).run_as_user = Some(Int64Value { value: 2147483647 });
    let id = create_start(&p.h, &pod, &pc, c).await;
    let s = sh(&p, &id, "cat /proc/self/status").await;
    assert_eq!(
        status_line(&s, "Uid"),
        "2147483647 2147483647 2147483647 2147483647"
    );
    stop_remove_pod(&p.h, &pod).await;
}

/// CVE-2024-21626: no descriptor of the node's procfs (or anything else
/// of the runtime's) is open when the payload's execve resolves its path,
/// for a container's init and for an exec; a working directory through
/// such a descriptor is refused.
#[tokio::test(flavor = "multi_thread")]
async fn no_runtime_descriptor_reaches_the_payload() {
    if !common::require_root() {
        return;
    }
    // Where the pods' mounts live is named: the node's namespace here.
    descriptors(vec!["--mount-namespace".into(), "node".into()]).await;
}

/// The same with each pod's mounts in its monitor's own namespace, whose
/// monitor holds the node's root (descriptor 3) to open what the node
/// names: neither the init nor an exec has it at its execve.
#[tokio::test(flavor = "multi_thread")]
async fn the_node_root_a_pods_monitor_holds_reaches_no_payload() {
    if !common::require_root() {
        return;
    }
    descriptors(vec!["--mount-namespace".into(), "pod".into()]).await;
}

async fn descriptors(args: Vec<String>) {
    let p = pod::setup_with(vec![], "/usr/lib/cni", args).await;
    let (pod, pc) = host_pod(&p, "fds").await;
    let img = app_image(&p).await;
    // The init and an exec see stdio only (ls's own listing is its 3).
    let id = create_start(
        &p.h,
        &pod,
        &pc,
        shell(
            &img,
            "fds",
            "ls /proc/self/fd > /tmp/init-fds; sleep 3600",
            &[],
        ),
    )
    .await;
    let fds = wait_for!(10, "the init's listing", {
        let r = exec(&p, &id, &["cat", "/tmp/init-fds"]).await;
        (r.exit_code == 0 && !r.stdout.is_empty()).then_some(r.stdout)
    });
    assert_eq!(
        String::from_utf8_lossy(&fds)
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["0", "1", "2", "3"]
    );
    let fds = sh(&p, &id, "ls /proc/self/fd").await;
    assert_eq!(
        fds.split_whitespace().collect::<Vec<_>>(),
        ["0", "1", "2", "3"]
    );
    // The attack itself: argv[0] through each low descriptor, as an exec
    // and as a container's command.
    // A descriptor of the node's root: its busybox directly.
    let low = (3..=10).map(|n| format!("/proc/self/fd/{n}/bin/busybox"));
    let through = (3..=64).map(|n| format!("/proc/self/fd/{n}/self/root/bin/busybox"));
    for path in low.chain(through) {
        let n = path.clone();
        // Refused as a call (the path does not resolve), or run and failed.
        if let Ok(r) = exec_sync(&p.h, &id, &[&path, "echo", "escaped"]).await {
            assert_ne!(r.exit_code, 0, "fd {n}: {r:?}");
            assert!(
                !String::from_utf8_lossy(&r.stdout).contains("escaped"),
                "fd {n}"
            );
        }
    }
    let mut attacks = Vec::new();
    for n in 3..=6 {
        let path = format!("/proc/self/fd/{n}/bin/busybox");
        attacks.push(ccfg(
            &img,
            &format!("root{n}"),
            &[&path],
            &["echo", "escaped"],
        ));
    }
    for n in 3..=48 {
        let path = format!("/proc/self/fd/{n}/self/root/bin/busybox");
        attacks.push(ccfg(
            &img,
            &format!("argv{n}"),
            &[&path],
            &["echo", "escaped"],
        ));
    }
    // Attack 1: the working directory through a descriptor.
    for n in 3..=10 {
        let mut c = ccfg(
            &img,
            &format!("cwd{n}"),
            &[],
            &["pwd; ls .. > /dev/null && echo escaped"],
        );
        c.working_dir = format!("/proc/self/fd/{n}");
        attacks.push(c);
    }
    // A working directory in a process's own /proc directory is refused
    // at once.
    let mut c = ccfg(&img, "cwd-refused", &[], &["true"]);
    c.working_dir = "/proc/self/fd/7".into();
    invalid(
        try_create(&p.h, &pod, &pc, c).await,
        &["working_dir", "/proc/self/fd/7"],
    );
    for c in attacks {
        let name = c.metadata.as_ref().unwrap().name.clone();
        if let Some(st) = run_to_exit(&p.h, &pod, &pc, c).await {
            assert_ne!(st.exit_code, 0, "{name} ran");
        }
        // Its stdout, not the runtime's error quoting the args.
        let log =
            p.h.dir
                .path()
                .join("logs/fds")
                .join(format!("{name}/0.log"));
        let text = std::fs::read_to_string(log).unwrap_or_default();
        assert!(!text.contains("stdout F escaped"), "{name}: {text}");
    }
    stop_remove_pod(&p.h, &pod).await;
}

/// CVE-2021-41103 / CVE-2024-25621: with the node's /var/lib open to all
/// (as it is), an unprivileged user of the node reaches nothing an image
/// ships (a setuid-root binary, a device node, a world-writable dir) nor
/// any pod's files, and cannot list the store.
#[tokio::test(flavor = "multi_thread")]
async fn the_store_is_closed_to_the_nodes_users() {
    if !common::require_root() {
        return;
    }
    let p = pod::setup(vec![]).await;
    // The test's dir stands for /var/lib and /run: open to all.
    std::fs::set_permissions(p.h.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bb = std::fs::read("/bin/busybox").unwrap();
    let img = image(
        &p,
        "store",
        vec![
            Entry::Dir("s/".into(), 0o755),
            Entry::FileFull("s/busybox".into(), bb, 0o4755, 0, 0, 0, vec![]),
            Entry::Char("mem".into(), 1, 3),
            Entry::Dir("open/".into(), 0o777),
        ],
        serde_json::json!({}),
    )
    .await;
    let (pod, pc) = host_pod(&p, "store").await;
    let id = create_start(&p.h, &pod, &pc, shell(&img, "c", "sleep 3600", &[])).await;
    // Where the image's files are, found as root.
    let root = p.h.root();
    // (With each pod's mounts in its monitor's namespace, through its root.)
    let rootfs = pod::as_pod_sees(
        &p.h,
        &pod,
        &root.join("containers").join(&id).join("rootfs"),
    );
    let suid_layer = find(&root.join("snapshots"), "s")
        .expect("the layer's dir of the setuid file")
        .join("busybox");
    let layer = suid_layer.parent().unwrap().parent().unwrap().to_path_buf();
    let targets: Vec<(PathBuf, &str)> = vec![
        (suid_layer.clone(), "exec"),
        (rootfs.join("s/busybox"), "exec"),
        (layer.join("mem"), "open"),
        (rootfs.join("mem"), "open"),
        (layer.join("open/x"), "write"),
        (
            pod::as_pod_sees(&p.h, &pod, &root.join("sandboxes").join(&pod).join("shm")).join("x"),
            "write",
        ),
        (root.join("snapshots"), "list"),
        (root.join("containers"), "list"),
        (root.join("sandboxes"), "list"),
        (root.join("content"), "list"),
        (p.h.dir.path().join("run/s"), "list"),
        (p.h.dir.path().join("run/ns"), "list"),
    ];
    for (path, how) in &targets {
        let script = match *how {
            "exec" => format!("{} true", path.display()),
            "open" => format!("head -c1 {} >/dev/null", path.display()),
            "write" => format!("echo x > {}", path.display()),
            _ => format!("ls {}", path.display()),
        };
        let out = as_nobody(&script);
        assert!(
            !out.status.success(),
            "uid 65534 could {how} {}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("Permission denied"),
            "{how} {}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // What the attack aimed at is there, setuid-root, for root alone.
    for f in [&suid_layer, &rootfs.join("s/busybox")] {
        let md = std::fs::metadata(f).unwrap();
        assert_eq!(
            (md.uid(), md.mode() & 0o4000),
            (0, 0o4000),
            "{}",
            f.display()
        );
    }
    assert!(std::fs::metadata(rootfs.join("mem"))
        .unwrap()
        .file_type()
        .is_char_device());
    assert_eq!(
        sh(&p, &id, "ls -ld /open").await.split(' ').next(),
        Some("drwxrwxrwx")
    );
    let mode = |q: &Path| std::fs::metadata(q).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&root), 0o711);
    assert_eq!(mode(&p.h.dir.path().join("run")), 0o711);
    assert_eq!(mode(&root.join("containers").join(&id)), 0o700);
    stop_remove_pod(&p.h, &pod).await;
}

/// The first path under `dir` whose file name is `name` (no symlinks
/// followed).
fn find(dir: &Path, name: &str) -> Option<PathBuf> {
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let path = e.path();
        if e.file_name() == name {
            return Some(path);
        }
        if e.file_type().ok()?.is_dir() {
            if let Some(f) = find(&path, name) {
                return Some(f);
            }
        }
    }
    None
}

/// Runs `script` as uid and gid 65534, with no groups and no
/// capabilities.
fn as_nobody(script: &str) -> std::process::Output {
    use std::os::unix::process::CommandExt;
    std::process::Command::new("/bin/busybox")
        .args(["sh", "-c", script])
        .uid(65534)
        .gid(65534)
        .env_clear()
        .env("PATH", "/bin:/usr/bin")
        .current_dir("/")
        .output()
        .unwrap()
}

/// CVE-2023-25173 and CVE-2022-29162: a container and an exec get the
/// groups of their user (the primary gid among them) and no inheritable
/// or ambient capability, whatever the server was started with.
#[tokio::test(flavor = "multi_thread")]
async fn groups_and_capabilities_never_come_from_the_server() {
    if !common::require_root() {
        return;
    }
    let mut p = pod::setup(vec![]).await;
    restart_from_a_rich_shell(&mut p).await;
    let user = image(&p, "user", vec![], serde_json::json!({"User": "1000:1000"})).await;
    let root = app_image(&p).await;
    let (pod, pc) = host_pod(&p, "groups").await;
    for (img, name, groups) in [(&user, "user", "1000"), (&root, "root", "0")] {
        let id = create_start(
            &p.h,
            &pod,
            &pc,
            shell(img, name, "cat /proc/self/status > /tmp/s; sleep 3600", &[]),
        )
        .await;
        let init = wait_for!(10, "the init's status", {
            let r = exec(&p, &id, &["cat", "/tmp/s"]).await;
            (r.exit_code == 0 && !r.stdout.is_empty())
                .then(|| String::from_utf8_lossy(&r.stdout).into_owned())
        });
        let ex = sh(&p, &id, "cat /proc/self/status").await;
        for (who, st) in [("init", &init), ("exec", &ex)] {
            assert_eq!(status_line(st, "Groups"), groups, "{name} {who}");
            assert_eq!(
                status_line(st, "CapInh"),
                "0000000000000000",
                "{name} {who}"
            );
            assert_eq!(
                status_line(st, "CapAmb"),
                "0000000000000000",
                "{name} {who}"
            );
        }
    }
    stop_remove_pod(&p.h, &pod).await;
}

/// An image's /etc/passwd or /etc/group that is a device (endless) or a
/// FIFO (never ends): CreateContainer refuses it at once, the server's
/// memory stays flat, it answers other RPCs throughout, and nothing is
/// left behind.
#[tokio::test(flavor = "multi_thread")]
async fn user_databases_that_never_end_are_refused() {
    if !common::require_root() {
        return;
    }
    let p = pod::setup(vec![]).await;
    let (pod, pc) = host_pod(&p, "db").await;
    let cases = [
        (
            "zero",
            Entry::Char("etc/passwd".into(), 1, 5),
            "nobody",
            "character device",
        ),
        ("fifo", Entry::Fifo("etc/passwd".into()), "nobody", "FIFO"),
        ("fifo-uid", Entry::Fifo("etc/passwd".into()), "1000", "FIFO"),
        (
            "group-fifo",
            Entry::Fifo("etc/group".into()),
            "1000:1000",
            "FIFO",
        ),
        (
            "dir",
            Entry::Dir("etc/group/".into(), 0o755),
            "1000",
            "directory",
        ),
    ];
    let before = rss_kib(p.h.pid());
    for (name, entry, user, kind) in cases {
        let img = image(&p, name, vec![entry], serde_json::json!({"User": user})).await;
        let t = Instant::now();
        let r = tokio::time::timeout(
            Duration::from_secs(20),
            try_create(&p.h, &pod, &pc, ccfg(&img, name, &[], &[])),
        )
        .await
        .expect("CreateContainer must answer");
        invalid(r, &[kind, "not a regular file"]);
        assert!(t.elapsed() < Duration::from_secs(20));
        p.h.runtime()
            .await
            .version(VersionRequest::default())
            .await
            .unwrap();
    }
    let after = rss_kib(p.h.pid());
    assert!(
        after < before + 64 * 1024,
        "server RSS {before} → {after} KiB"
    );
    assert_eq!(container_dirs(&p), 0);
    let t = Instant::now();
    stop_remove_pod(&p.h, &pod).await;
    assert!(
        t.elapsed() < Duration::from_secs(30),
        "teardown took {:?}",
        t.elapsed()
    );
    assert!(pod::leftovers(&p).is_empty(), "{:?}", pod::leftovers(&p));
}

/// CVE-2019-5736: the binary a container's init runs from until its
/// execve (its shim's) is a sealed copy: not the node's husk, and not
/// writable through /proc/<pid>/exe.
#[tokio::test(flavor = "multi_thread")]
async fn the_shims_binary_cannot_be_written() {
    if !common::require_root() {
        return;
    }
    let p = pod::setup(vec![]).await;
    let (pod, pc) = host_pod(&p, "exe").await;
    let img = app_image(&p).await;
    let id = create(&p.h, &pod, &pc, shell(&img, "c", "sleep 3600", &[])).await;
    let host = std::fs::metadata(env!("CARGO_BIN_EXE_husk")).unwrap();
    let shim = common::pod::shim_pid(&p.h, &pod);
    // The created container's init, waiting for its start, is a clone
    // of the shim: its exe is the shim's.
    let st = container_status(&p.h, &id).await;
    assert_eq!(st.state, ContainerState::ContainerCreated as i32);
    let mut pids = vec![shim];
    pids.extend(descendants(shim));
    assert!(pids.len() >= 2, "the shim and the created init: {pids:?}");
    for pid in pids {
        let exe = PathBuf::from(format!("/proc/{pid}/exe"));
        let md = std::fs::metadata(&exe).unwrap();
        assert!(
            (md.dev(), md.ino()) != (host.dev(), host.ino()),
            "{pid} runs the node's husk"
        );
        let e = std::fs::OpenOptions::new().write(true).open(&exe);
        let e = e.map(|_| ()).expect_err("the exe opened for writing");
        assert!(
            matches!(
                e.raw_os_error(),
                Some(libc::EROFS) | Some(libc::EPERM) | Some(libc::ETXTBSY)
            ),
            "{pid}: {e}"
        );
    }
    start(&p.h, &id).await;
    let after = std::fs::metadata(env!("CARGO_BIN_EXE_husk")).unwrap();
    assert_eq!((after.len(), after.mtime()), (host.len(), host.mtime()));
    stop_remove_pod(&p.h, &pod).await;
}

fn descendants(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        for t in std::fs::read_dir(format!("/proc/{p}/task"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let kids = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
            for k in kids.split_whitespace().filter_map(|k| k.parse().ok()) {
                out.push(k);
                todo.push(k);
            }
        }
    }
    out
}

/// runc's rule: a bind mount on or under /proc is refused (it would
/// cover /proc/self/attr or /proc/sys), also through an image's symlink,
/// except over the files lxcfs provides.
#[tokio::test(flavor = "multi_thread")]
async fn bind_mounts_under_proc_are_refused() {
    if !common::require_root() {
        return;
    }
    let p = pod::setup(vec![]).await;
    let img = image(
        &p,
        "proclink",
        vec![Entry::Symlink("p".into(), "/proc".into())],
        serde_json::json!({}),
    )
    .await;
    let (pod, pc) = host_pod(&p, "proc").await;
    let src = tempfile::tempdir().unwrap();
    for dest in [
        "/proc",
        "/proc/sys/kernel",
        "/proc/self/attr",
        "/proc/../proc/sys",
        "/p/sys",
    ] {
        let mut c = ccfg(&img, "m", &[], &[]);
        c.mounts = vec![Mount {
            container_path: dest.into(),
            host_path: src.path().display().to_string(),
            ..Default::default()
        }];
        invalid(try_create(&p.h, &pod, &pc, c).await, &[dest, "/proc"]);
    }
    assert_eq!(container_dirs(&p), 0);
    let meminfo = src.path().join("meminfo");
    std::fs::write(&meminfo, "MemTotal: 1 kB\n").unwrap();
    let mut c = ccfg(&img, "lxcfs", &[], &[]);
    c.mounts = vec![Mount {
        container_path: "/proc/meminfo".into(),
        host_path: meminfo.display().to_string(),
        readonly: true,
        ..Default::default()
    }];
    let id = create_start(&p.h, &pod, &pc, c).await;
    assert_eq!(sh(&p, &id, "cat /proc/meminfo").await, "MemTotal: 1 kB\n");
    stop_remove_pod(&p.h, &pod).await;
}

/// The user's home from the image's passwd is HOME when the container's
/// environment has none (libcontainer would otherwise look the user up
/// itself, with glibc, in the image's files); a missing working directory
/// is made for the user.
#[tokio::test(flavor = "multi_thread")]
async fn home_and_working_dir_come_from_the_image() {
    if !common::require_root() {
        return;
    }
    let p = pod::setup(vec![]).await;
    let img = image(
        &p,
        "home",
        vec![Entry::File(
            "etc/passwd".into(),
            b"root:x:0:0:root:/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/sh\n".to_vec(),
            0o644,
        )],
        serde_json::json!({"User": "alice"}),
    )
    .await;
    let (pod, pc) = host_pod(&p, "home").await;
    let id = create_start(&p.h, &pod, &pc, shell(&img, "c", "sleep 3600", &[])).await;
    assert_eq!(
        sh(&p, &id, "echo $HOME; id -u; id -G").await,
        "/home/alice\n1000\n1000\n"
    );
    // A working directory the image lacks is made, owned by the user (as
    // runc makes it).
    let mut c = shell(&img, "cwd", "pwd; stat -c %u:%g .; sleep 3600", &[]);
    c.working_dir = "/work/deep".into();
    create_start(&p.h, &pod, &pc, c).await;
    let log = p.h.dir.path().join("logs/home/cwd/0.log");
    let text = wait_for!(10, "the cwd's owner", {
        let t = std::fs::read_to_string(&log).unwrap_or_default();
        t.contains("1000:1000").then_some(t)
    });
    assert!(text.contains("stdout F /work/deep\n"), "{text}");
    stop_remove_pod(&p.h, &pod).await;
}
