//! Pod sandboxes end to end on a real husk serve: the pause container in a
//! per-pod shim, pinned namespaces, real CNI plugins on a test-unique
//! bridge, the pod files, and nothing left behind after removal or after a
//! failure at any step.
#![allow(clippy::unwrap_used)]

mod common;

use common::cni::iptables_mentions;
use common::ctr::stop_remove_pod;
use common::pod::*;
use common::server::Husk;
use husk::api::cri::*;
use std::path::Path;
use std::process::Command;

#[tokio::test(flavor = "multi_thread")]
async fn two_pods_network_files_lifecycle_and_cleanup() {
    if !common::require_root() {
        return;
    }
    let p = setup(vec![]).await;
    let h = &p.h;
    let mut ca = p.config("pod-a");
    ca.linux.as_mut().unwrap().security_context = Some(LinuxSandboxSecurityContext {
        seccomp: Some(SecurityProfile {
            profile_type: security_profile::ProfileType::RuntimeDefault as i32,
            localhost_ref: String::new(),
        }),
        ..Default::default()
    });
    let a = run(h, ca).await.unwrap();
    let b = run(h, p.config("pod-b")).await.unwrap();
    let (sa, sb) = (status(h, &a).await.unwrap(), status(h, &b).await.unwrap());
    let st = sa.status.clone().unwrap();
    assert_eq!(st.state, PodSandboxState::SandboxReady as i32);
    assert_eq!(st.metadata.as_ref().unwrap().name, "pod-a");
    assert!(
        st.created_at > 1_600_000_000_000_000_000,
        "created_at in ns"
    );
    assert_eq!(st.labels["app"], "pod-a");
    let (ipa, ipb) = (
        st.network.unwrap().ip,
        sb.status.clone().unwrap().network.unwrap().ip,
    );
    assert!(ipa.starts_with(&p.net.subnet_prefix) && ipb.starts_with(&p.net.subnet_prefix));
    assert_ne!(ipa, ipb);

    // The pause process: its own pid namespace, the pod's hostname, running as 65534.
    let pid = pause_pid(&sa);
    let pstatus = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(
        pstatus.lines().any(|l| l == "Seccomp:\t2"),
        "RuntimeDefault filters the pause: {pstatus}"
    );
    assert!(
        pstatus
            .lines()
            .any(|l| l.starts_with("Uid:") && l.contains("65534")),
        "{pstatus}"
    );
    assert_ne!(
        std::fs::read_link(format!("/proc/{pid}/ns/pid")).unwrap(),
        std::fs::read_link("/proc/self/ns/pid").unwrap()
    );
    let hn = Command::new("nsenter")
        .args(["-t", &pid.to_string(), "-u", "hostname"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&hn.stdout).trim(), "pod-a");
    // Pods reach each other over the bridge.
    let ping = Command::new("nsenter")
        .args([
            "-t",
            &pid.to_string(),
            "-n",
            "/bin/busybox",
            "ping",
            "-c",
            "1",
            "-W",
            "2",
            &ipb,
        ])
        .output()
        .unwrap();
    assert!(
        ping.status.success(),
        "{}",
        String::from_utf8_lossy(&ping.stdout)
    );
    // The pod files.
    let dir = h.root().join("sandboxes").join(&a);
    let resolv = std::fs::read_to_string(dir.join("resolv.conf")).unwrap();
    assert!(
        resolv.contains("nameserver 10.96.0.10")
            && resolv.contains("search default.svc.cluster.local")
            && resolv.contains("options ndots:5"),
        "{resolv}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("hostname")).unwrap(),
        "pod-a\n"
    );
    assert!(std::fs::read_to_string(dir.join("hosts"))
        .unwrap()
        .contains(&format!("{ipa}\tpod-a")));

    // The same name again is refused, naming the existing sandbox.
    let e = run(h, p.config("pod-a")).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::AlreadyExists);
    assert!(e.message().contains(&a), "{}", e.message());

    // List with filters.
    let mut rt = h.runtime().await;
    let list = |f: PodSandboxFilter| ListPodSandboxRequest { filter: Some(f) };
    assert_eq!(
        rt.list_pod_sandbox(list(PodSandboxFilter::default()))
            .await
            .unwrap()
            .into_inner()
            .items
            .len(),
        2
    );
    let by_label = rt
        .list_pod_sandbox(list(PodSandboxFilter {
            label_selector: [("app".to_string(), "pod-b".to_string())].into(),
            ..Default::default()
        }))
        .await
        .unwrap()
        .into_inner()
        .items;
    assert_eq!(
        by_label.iter().map(|s| s.id.clone()).collect::<Vec<_>>(),
        vec![b.clone()]
    );
    let by_prefix = rt
        .list_pod_sandbox(list(PodSandboxFilter {
            id: a[..8].to_string(),
            ..Default::default()
        }))
        .await
        .unwrap()
        .into_inner()
        .items;
    assert_eq!(by_prefix.len(), 1);

    // Stop: NOTREADY, the pause process gone, network released; twice is fine.
    rt.stop_pod_sandbox(StopPodSandboxRequest {
        pod_sandbox_id: a.clone(),
    })
    .await
    .unwrap();
    rt.stop_pod_sandbox(StopPodSandboxRequest {
        pod_sandbox_id: a.clone(),
    })
    .await
    .unwrap();
    let st = status(h, &a).await.unwrap().status.unwrap();
    assert_eq!(st.state, PodSandboxState::SandboxNotready as i32);
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .unwrap()
                .contains(") Z")
    );
    assert_eq!(p.net.leases(), 1);
    // A stopped pod needs no monitor: its shim has exited; the other's runs.
    let shims = |id: &str| shims_for(&h.dir.path().join("run").join("s").join(id));
    assert_eq!((shims(&a), shims(&b)), (0, 1));
    let ready = rt
        .list_pod_sandbox(list(PodSandboxFilter {
            state: Some(PodSandboxStateValue {
                state: PodSandboxState::SandboxReady as i32,
            }),
            ..Default::default()
        }))
        .await
        .unwrap()
        .into_inner()
        .items;
    assert_eq!(ready.len(), 1);

    // Remove both (twice); unknown ids are success for stop and remove.
    for id in [&a, &b, &a, &b] {
        rt.remove_pod_sandbox(RemovePodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        })
        .await
        .unwrap();
    }
    rt.stop_pod_sandbox(StopPodSandboxRequest {
        pod_sandbox_id: "nonexistent".into(),
    })
    .await
    .unwrap();
    assert_eq!(
        status(h, &a).await.unwrap_err().code(),
        tonic::Code::NotFound
    );
    assert_eq!(leftovers(&p), Vec::<String>::new());
    assert_eq!(iptables_mentions(&a) + iptables_mentions(&b), 0);
    timings_of_the_pods_above(h).await;
}

/// The admin API's Timings after two RunPodSandbox, one StopPodSandbox
/// (twice) and the removals: each RPC timed stage by stage, the waits on
/// the CNI plugins and the runtime library marked external, the plugins
/// one by one; a clearing read empties the table.
async fn timings_of_the_pods_above(h: &Husk) {
    let mut admin = husk::api::admin::admin_client::AdminClient::new(h.channel().await);
    let read = |clear| husk::api::admin::TimingsRequest { clear };
    let stages = admin.timings(read(true)).await.unwrap().into_inner().stages;
    let get = |op: &str, stage: &str| {
        stages
            .iter()
            .find(|s| s.op == op && s.stage == stage)
            .unwrap_or_else(|| panic!("no {op}/{stage} in {stages:?}"))
    };
    // Two runs, the refused third is not a sample.
    assert_eq!(get("RunPodSandbox", "rpc").micros.len(), 2);
    let total = &get("RunPodSandbox", "total").micros;
    for (stage, external) in [
        ("namespaces", false),
        ("bundle", false),
        ("pause runtime", true),
        ("cni wait", true),
        ("files", false),
        ("record", false),
    ] {
        let s = get("RunPodSandbox", stage);
        assert_eq!(s.external, external, "{s:?}");
        assert_eq!(s.micros.len(), 2, "{s:?}");
    }
    let run_stages: Vec<_> = stages
        .iter()
        .filter(|s| s.op == "RunPodSandbox" && s.stage != "total" && s.stage != "rpc")
        .collect();
    for (i, whole) in total.iter().enumerate() {
        let sum: u64 = run_stages.iter().map(|s| s.micros[i]).sum();
        assert!(sum <= *whole, "stages add up to the whole: {sum} > {whole}");
        assert!(sum * 10 >= whole * 9, "and cover it: {sum} of {whole}");
    }
    assert!(get("CNI ADD", "bridge").external);
    assert_eq!(get("CNI ADD", "portmap").micros.len(), 2);
    assert_eq!(get("CNI DEL", "bridge").micros.len(), 2);
    // Stopped once for real; the second stop of `a` and the stops inside
    // the removals found nothing to do and time nothing but the RPC.
    assert_eq!(get("StopPodSandbox", "total").micros.len(), 2);
    assert!(get("StopPodSandbox", "cni wait").external);
    assert_eq!(get("RemovePodSandbox", "files").micros.len(), 2);
    let after = admin
        .timings(read(false))
        .await
        .unwrap()
        .into_inner()
        .stages;
    assert!(after.is_empty(), "{after:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn host_network_pod_and_a_host_port() {
    if !common::require_root() {
        return;
    }
    let p = setup(vec![]).await;
    let h = &p.h;
    let mut c = p.config("hostnet");
    host_network(&mut c);
    let id = run(h, c).await.unwrap();
    let st = status(h, &id).await.unwrap();
    let pid = pause_pid(&st);
    assert_eq!(
        std::fs::read_link(format!("/proc/{pid}/ns/net")).unwrap(),
        std::fs::read_link("/proc/self/ns/net").unwrap(),
        "host network"
    );
    assert_eq!(p.net.veths(), 0, "no CNI for a host-network pod");
    assert_eq!(
        st.status
            .unwrap()
            .linux
            .unwrap()
            .namespaces
            .unwrap()
            .options
            .unwrap()
            .network,
        NamespaceMode::Node as i32
    );

    // A hostPort on a pod network reaches a server inside from 127.0.0.1.
    let port = common::free_port();
    let mut c = p.config("web");
    c.port_mappings = vec![PortMapping {
        protocol: Protocol::Tcp as i32,
        container_port: 8080,
        host_port: port as i32,
        host_ip: "127.0.0.1".into(),
    }];
    let web = run(h, c).await.unwrap();
    let wpid = pause_pid(&status(h, &web).await.unwrap());
    let www = h.dir.path().join("www");
    std::fs::create_dir_all(&www).unwrap();
    std::fs::write(www.join("index.html"), "pod says hi").unwrap();
    let mut httpd = Command::new("nsenter")
        .args([
            "-t",
            &wpid.to_string(),
            "-n",
            "/bin/busybox",
            "httpd",
            "-f",
            "-p",
            "8080",
            "-h",
        ])
        .arg(&www)
        .spawn()
        .unwrap();
    let body = common::http_get_until(port, "/index.html", "hi");
    let _ = httpd.kill();
    let _ = httpd.wait();
    assert!(body.contains("pod says hi"), "{body:?}");
    let mut rt = h.runtime().await;
    for id in [&id, &web] {
        rt.remove_pod_sandbox(RemovePodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        })
        .await
        .unwrap();
    }
    assert_eq!(leftovers(&p), Vec::<String>::new());
    assert_eq!(iptables_mentions(&web), 0, "no portmap rule left");
}

#[tokio::test(flavor = "multi_thread")]
async fn failures_unwind_everything() {
    if !common::require_root() {
        return;
    }
    // A CNI plugin that fails after bridge has attached the pod.
    let p = setup(vec![serde_json::json!({"type": "no-such-plugin"})]).await;
    let h = &p.h;
    let e = run(h, p.config("cni-fails")).await.unwrap_err();
    assert!(e.message().contains("no-such-plugin"), "{}", e.message());
    assert_eq!(leftovers(&p), Vec::<String>::new());

    // A bad sysctl: InvalidArgument before anything is made.
    let mut c = p.config("bad-sysctl");
    c.linux.as_mut().unwrap().sysctls = [("kernel.hostname".to_string(), "x".to_string())].into();
    let e = run(h, c).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(e.message().contains("kernel.hostname"));
    // Missing metadata.
    let mut c = p.config("no-uid");
    c.metadata.as_mut().unwrap().uid.clear();
    assert_eq!(
        run(h, c).await.unwrap_err().code(),
        tonic::Code::InvalidArgument
    );
    assert_eq!(leftovers(&p), Vec::<String>::new());

    // No network config at all: FailedPrecondition, nothing left.
    std::fs::remove_file(p.h.dir.path().join("net.d/10-test.conflist")).unwrap();
    let e = run(h, p.config("no-net")).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    assert!(
        e.message().contains("no CNI network config"),
        "{}",
        e.message()
    );
    assert_eq!(leftovers(&p), Vec::<String>::new());

    // The name was released by every failure: a good run now works.
    net_ok(&p).await;
}

async fn net_ok(p: &Pod) {
    // Replace the failing conflist with a working one.
    p.net.write(&p.h.dir.path().join("net.d"), vec![]);
    let id = run(&p.h, p.config("cni-fails")).await.unwrap();
    p.h.runtime()
        .await
        .remove_pod_sandbox(RemovePodSandboxRequest { pod_sandbox_id: id })
        .await
        .unwrap();
    assert_eq!(leftovers(p), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn missing_sandbox_image_fails_cleanly() {
    if !common::require_root() {
        return;
    }
    let p = setup(vec![]).await;
    let h2 = Husk::start_with(vec![
        "--sandbox-image".into(),
        format!("{}/k8s/pause:absent", p.reg.host()),
    ])
    .await;
    p.net.write(&h2.dir.path().join("net.d"), vec![]);
    let e = run(&h2, p.config("x")).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound, "{e:?}");
    // Nothing but the spare the server makes ahead.
    let (left, spares) = unspared(h2.dir.path());
    assert!(spares.len() <= 1, "{spares:?}");
    for (sub, names) in left {
        assert!(names.is_empty(), "{sub}: {names:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn pods_survive_a_server_kill_and_a_killed_shim_is_reported() {
    if !common::require_root() {
        return;
    }
    let mut p = setup(vec![]).await;
    let mut c = p.config("survivor");
    c.linux.as_mut().unwrap().sysctls = [(
        "net.ipv4.ip_unprivileged_port_start".to_string(),
        "0".to_string(),
    )]
    .into();
    let a = run(&p.h, c).await.unwrap();
    let b = run(&p.h, p.config("victim")).await.unwrap();
    let pa = pause_pid(&status(&p.h, &a).await.unwrap());
    let pb = pause_pid(&status(&p.h, &b).await.unwrap());
    // The pod's sysctl was applied in its network namespace.
    let v = Command::new("nsenter")
        .args([
            "-t",
            &pa.to_string(),
            "-n",
            "cat",
            "/proc/sys/net/ipv4/ip_unprivileged_port_start",
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&v.stdout).trim(), "0");

    // kill -9 the server: the pods keep running, and a new server reports them.
    p.h.restart().await;
    assert!(alive(pa) && alive(pb), "pause processes outlive the server");
    let items =
        p.h.runtime()
            .await
            .list_pod_sandbox(ListPodSandboxRequest { filter: None })
            .await
            .unwrap()
            .into_inner()
            .items;
    assert_eq!(items.len(), 2);
    assert!(
        items
            .iter()
            .all(|s| s.state == PodSandboxState::SandboxReady as i32),
        "{items:?}"
    );
    assert_eq!(pause_pid(&status(&p.h, &a).await.unwrap()), pa);

    // kill -9 one pod's shim: that pod is reported NOTREADY, the other is fine.
    let shim: i32 = std::fs::read_to_string(p.h.dir.path().join("run/s").join(&b).join("shim.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(shim).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    for _ in 0..100 {
        if !alive(shim) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(
        status(&p.h, &b).await.unwrap().status.unwrap().state,
        PodSandboxState::SandboxNotready as i32
    );
    assert_eq!(
        status(&p.h, &a).await.unwrap().status.unwrap().state,
        PodSandboxState::SandboxReady as i32
    );

    // Both are still removed cleanly, pause processes included.
    let mut rt = p.h.runtime().await;
    for id in [&a, &b] {
        let r = rt
            .remove_pod_sandbox(RemovePodSandboxRequest {
                pod_sandbox_id: id.to_string(),
            })
            .await;
        let log = std::fs::read_to_string(p.h.dir.path().join("run/s").join(id).join("shim.log"))
            .unwrap_or_default();
        r.unwrap_or_else(|e| {
            panic!(
                "remove {id} (a={a}): {e:?}\nshim log: {log}\nhusk log: {}",
                p.h.log()
            )
        });
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(!alive(pa) && !alive(pb), "pause processes are gone");
    assert_eq!(leftovers(&p), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn not_found_names_what_was_not_found() {
    if !common::require_root() {
        return;
    }
    let p = setup(vec![]).await;
    let c = p.config("nf");
    let pod = run(&p.h, c.clone()).await.unwrap();
    let mut rt = p.h.runtime().await;
    let create = |pod: &str, image: &str| CreateContainerRequest {
        pod_sandbox_id: pod.into(),
        config: Some(ContainerConfig {
            metadata: Some(ContainerMetadata {
                name: "x".into(),
                attempt: 0,
            }),
            image: Some(ImageSpec {
                image: image.into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        sandbox_config: Some(c.clone()),
    };
    let cases = [
        (
            rt.create_container(create("feedbeef", "busybox"))
                .await
                .unwrap_err(),
            "pod sandbox feedbeef not found",
        ),
        (
            rt.create_container(create(&pod, "no/such:image"))
                .await
                .unwrap_err(),
            "image \"no/such:image\" not found (pull it first)",
        ),
        (
            rt.container_stats(ContainerStatsRequest {
                container_id: "feedbeef".into(),
            })
            .await
            .unwrap_err(),
            "container feedbeef not found",
        ),
    ];
    for (e, said) in cases {
        assert_eq!(e.code(), tonic::Code::NotFound, "{e:?}");
        assert_eq!(e.message(), said);
    }
    stop_remove_pod(&p.h, &pod).await;
    assert_eq!(leftovers(&p), Vec::<String>::new());
}
