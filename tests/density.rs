//! Density, bounded to what CI's time allows (the 1,000-pod run is
//! `make bench-density`): 200 running pods (each of the kubelet's usual
//! shape, its namespaces pinned without a pause, and one `sleep`, on the
//! CNI bridge) are listed, counted in stats and metrics, survive a
//! `kill -9` of the server (every pod back with its IP, every container
//! running), and leave nothing once removed; the server holds no
//! descriptor per pod and each pod's shim one thread. And the limit of a
//! Linux bridge, 1,023 ports: the pod past it is refused with the limit
//! named and nothing half-made.
#![allow(clippy::unwrap_used)]

mod common;

use common::ctr::*;
use common::pod::*;
use common::scrape::{scrape, value};
use husk::api::cri::*;
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

const PODS: usize = 200;

/// Ready pods and their IPs.
async fn ready_pods(p: &Pod) -> HashMap<String, String> {
    let mut rt = p.h.runtime().await;
    let items = rt
        .list_pod_sandbox(ListPodSandboxRequest {
            filter: Some(PodSandboxFilter {
                state: Some(PodSandboxStateValue {
                    state: PodSandboxState::SandboxReady as i32,
                }),
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .into_inner()
        .items;
    let mut out = HashMap::new();
    for i in items {
        let st = status(&p.h, &i.id).await.unwrap().status.unwrap();
        out.insert(i.id, st.network.unwrap_or_default().ip);
    }
    out
}

async fn running_containers(p: &Pod) -> usize {
    p.h.runtime()
        .await
        .list_containers(ListContainersRequest {
            filter: Some(ContainerFilter {
                state: Some(ContainerStateValue {
                    state: ContainerState::ContainerRunning as i32,
                }),
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .into_inner()
        .containers
        .len()
}

/// Pids of the husk shims of the server whose dir is `dir`.
fn shim_pids(dir: &Path) -> Vec<u32> {
    let out = Command::new("pgrep")
        .args(["-f", &format!("husk shim --dir {}", dir.display())])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|rd| rd.count())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn two_hundred_pods_are_listed_recovered_and_leave_nothing() {
    if !common::require_root() {
        return;
    }
    let port = common::free_port();
    let mut p = setup_with_metrics(port).await;
    let image = app_image(&p).await;
    let mut pods = Vec::with_capacity(PODS);
    for i in 0..PODS {
        let pc = pod_config(&p, &format!("d{i}"));
        let id = run(&p.h, pc.clone()).await.unwrap();
        create_start(&p.h, &id, &pc, ccfg(&image, "app", &[], &["sleep 3600"])).await;
        pods.push(id);
    }
    let before = ready_pods(&p).await;
    assert_eq!(before.len(), PODS);
    let ips: std::collections::HashSet<&String> = before.values().collect();
    assert_eq!(ips.len(), PODS, "each pod has an IP of its own");
    assert_eq!(running_containers(&p).await, PODS);

    // The kubelet's housekeeping sees every container and pod.
    let mut rt = p.h.runtime().await;
    let cs = rt
        .list_container_stats(ListContainerStatsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .stats;
    assert_eq!(cs.len(), PODS);
    assert!(cs
        .iter()
        .all(|s| s.writable_layer.is_some() && s.memory.is_some()));
    let ps = rt
        .list_pod_sandbox_stats(ListPodSandboxStatsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .stats;
    assert_eq!(ps.len(), PODS);
    let with_net = ps
        .iter()
        .filter(|s| s.linux.as_ref().and_then(|l| l.network.as_ref()).is_some())
        .count();
    assert_eq!(with_net, PODS, "every pod's network counters");

    // The metrics count them, and name codes as gRPC does.
    let m = scrape(port);
    assert_eq!(value(&m, r#"husk_pods{state="ready"}"#), PODS as f64, "{m}");
    assert_eq!(
        value(
            &m,
            r#"husk_grpc_requests_total{method="RunPodSandbox",code="OK"}"#
        ),
        PODS as f64
    );

    // Nothing held per pod: the server's descriptors do not grow with the
    // pods, and each pod's monitor is one thread.
    let fds = std::fs::read_dir(format!("/proc/{}/fd", p.h.pid()))
        .unwrap()
        .count();
    assert!(
        fds < 64,
        "the server holds {fds} descriptors at {PODS} pods"
    );
    // The spare the server makes ahead for the next pod has one too.
    let shims = shim_pids(p.h.dir.path());
    assert_eq!(shims.len(), PODS + spares(&p).len());
    let most = shims.iter().map(|s| threads(*s)).max().unwrap_or(0);
    assert_eq!(most, 1, "a shim runs {most} threads");

    // kill -9 at 200 pods: every pod comes back with its IP, every
    // container still running.
    p.h.restart().await;
    let back = wait_for!(60, "every pod back", {
        let now = ready_pods(&p).await;
        (now == before).then_some(now)
    });
    assert_eq!(back.len(), PODS);
    assert_eq!(running_containers(&p).await, PODS);
    let after: std::collections::HashSet<u32> = shim_pids(p.h.dir.path()).into_iter().collect();
    let pods_shims = shims.iter().filter(|s| after.contains(s)).count();
    assert!(pods_shims >= PODS, "the pods' shims outlive the server");

    // All stopped and removed, eight at a time, and nothing left.
    let mut tasks = Vec::new();
    for part in pods.chunks(PODS / 8) {
        let (ep, part) = (p.h.endpoint(), part.to_vec());
        tasks.push(tokio::spawn(async move {
            let mut rt = husk::api::cri::runtime_service_client::RuntimeServiceClient::new(
                husk::api::connect(&ep).await.unwrap(),
            );
            for id in part {
                rt.stop_pod_sandbox(StopPodSandboxRequest {
                    pod_sandbox_id: id.clone(),
                })
                .await
                .unwrap();
                rt.remove_pod_sandbox(RemovePodSandboxRequest { pod_sandbox_id: id })
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert!(ready_pods(&p).await.is_empty());
    let left = wait_for!(10, "nothing left", {
        let l = leftovers(&p);
        l.is_empty().then_some(l)
    });
    assert!(left.is_empty());
    assert!(common::mounts_below(&p.h.root()).is_empty());
}

/// A network namespace of the test's, deleted when dropped.
struct TestNetns(String);

impl TestNetns {
    fn new() -> TestNetns {
        let name = format!("hkdn{:08x}", rand::random::<u32>());
        assert!(Command::new("ip")
            .args(["netns", "add", &name])
            .status()
            .unwrap()
            .success());
        TestNetns(name)
    }

    fn path(&self) -> String {
        format!("/run/netns/{}", self.0)
    }

    fn ip(&self, args: &[&str]) -> String {
        let out = Command::new("ip")
            .args(["-n", &self.0])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "ip {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn ports(&self, bridge: &str) -> usize {
        self.ip(&["-o", "link", "show", "master", bridge])
            .lines()
            .count()
    }
}

impl Drop for TestNetns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// The CNI plugins of `/usr/lib/cni`, each run in the namespace at
/// `netns`: the test's bridge and its ports never touch the node's own.
fn plugins_in(netns: &str, dir: &Path) {
    for plugin in ["bridge", "host-local", "portmap", "loopback"] {
        let script = dir.join(plugin);
        common::write_executable(
            &script,
            &format!("#!/bin/sh\nexec nsenter --net={netns} /usr/lib/cni/{plugin} \"$@\"\n"),
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_bridge_refuses_the_pod_with_its_limit_and_leaves_nothing() {
    if !common::require_root() {
        return;
    }
    let ns = TestNetns::new();
    let bins = tempfile::tempdir().unwrap();
    plugins_in(&ns.path(), bins.path());
    let p = setup_with(vec![], &bins.path().display().to_string(), vec![]).await;
    // The bridge with 1,021 ports taken: room for two pods.
    let bridge = p.net.bridge.clone();
    let mut batch = format!("link add {bridge} type bridge\n");
    for i in 0..1021 {
        batch.push_str(&format!(
            "link add f{i} type veth peer name g{i}\nlink set f{i} master {bridge}\n"
        ));
    }
    let file = bins.path().join("batch");
    std::fs::write(&file, batch).unwrap();
    ns.ip(&["-batch", &file.display().to_string()]);
    assert_eq!(ns.ports(&bridge), 1021);

    let a = run(&p.h, pod_config(&p, "a")).await.unwrap();
    let b = run(&p.h, pod_config(&p, "b")).await.unwrap();
    assert_eq!(ns.ports(&bridge), husk::network::cni::BRIDGE_PORTS);
    let e = run(&p.h, pod_config(&p, "c")).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
    assert!(
        e.message().contains("bridge holds 1023 ports") && e.message().contains("xchange full"),
        "{}",
        e.message()
    );
    // The refused pod left nothing: not listed, no port, lease, pin or shim.
    let listed = ready_pods(&p).await;
    assert_eq!(listed.len(), 2);
    assert_eq!(ns.ports(&bridge), husk::network::cni::BRIDGE_PORTS);
    assert_eq!(p.net.leases(), 2);
    assert_eq!(shims_for(p.h.dir.path()) - spares(&p).len(), 2);
    // Removed, the two pods give their ports back, and nothing is left.
    for id in [a, b] {
        let mut rt = p.h.runtime().await;
        rt.stop_pod_sandbox(StopPodSandboxRequest {
            pod_sandbox_id: id.clone(),
        })
        .await
        .unwrap();
        rt.remove_pod_sandbox(RemovePodSandboxRequest { pod_sandbox_id: id })
            .await
            .unwrap();
    }
    assert_eq!(ns.ports(&bridge), 1021);
    assert_eq!(leftovers(&p), Vec::<String>::new(), "{}", p.h.log());
}
