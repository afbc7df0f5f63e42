//! Stats and resource updates on a real husk serve: CPU, memory and
//! writable-layer figures that move when containers burn CPU, hold memory
//! and write files; pod figures with network counters after real traffic;
//! the metrics RPCs; filters; live resource updates seen in the cgroup
//! files, applied whole or not at all.
#![allow(clippy::unwrap_used)]

mod common;

use common::ctr::*;
use common::pod::*;
use husk::api::cri::*;
use std::time::Duration;

async fn container_stats(h: &common::server::Husk, id: &str) -> ContainerStats {
    h.runtime()
        .await
        .container_stats(ContainerStatsRequest {
            container_id: id.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .stats
        .unwrap()
}

async fn list_ids(h: &common::server::Husk, f: ContainerStatsFilter) -> Vec<String> {
    let mut v: Vec<String> = h
        .runtime()
        .await
        .list_container_stats(ListContainerStatsRequest { filter: Some(f) })
        .await
        .unwrap()
        .into_inner()
        .stats
        .into_iter()
        .map(|s| s.attributes.unwrap().id)
        .collect();
    v.sort();
    v
}

async fn pod_stats(h: &common::server::Husk, id: &str) -> PodSandboxStats {
    h.runtime()
        .await
        .pod_sandbox_stats(PodSandboxStatsRequest {
            pod_sandbox_id: id.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .stats
        .unwrap()
}

fn v(x: &Option<UInt64Value>) -> u64 {
    x.as_ref().expect("value set").value
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread")]
async fn stats_move_with_cpu_memory_and_writes_and_filters_work() {
    if !common::require_root() {
        return;
    }
    let p = setup(vec![]).await;
    let h = &p.h;
    let image = app_image(&p).await;
    let (pca, pcb) = (pod_config(&p, "stats-a"), pod_config(&p, "stats-b"));
    let pa = run(h, pca.clone()).await.unwrap();
    let pb = run(h, pcb.clone()).await.unwrap();
    let burner = create_start(
        h,
        &pa,
        &pca,
        shell(&image, "burner", "while :; do :; done", &[("role", "cpu")]),
    )
    .await;
    let hog = create_start(
        h,
        &pa,
        &pca,
        shell(
            &image,
            "hog",
            "head -c 5000000 /dev/urandom > /tmp/blob; x=$(yes abcdefgh | head -c 60000000); echo held; while :; do sleep 3600; done",
            &[("role", "mem")],
        ),
    )
    .await;
    let idle = create_start(
        h,
        &pb,
        &pcb,
        shell(&image, "idle", "sleep 3600", &[("role", "idle")]),
    )
    .await;

    // Memory: the shell variable shows as RSS and working set, the file in
    // the writable layer.
    // The layer's figure is walked at most once a period and counts
    // allocated blocks, which may lag the write (delayed allocation): wait
    // for both.
    let s = wait_for!(30, "the hog's memory and writable layer", {
        let s = container_stats(h, &hog).await;
        let layer = s
            .writable_layer
            .as_ref()
            .is_some_and(|w| v(&w.used_bytes) >= 5_000_000);
        s.memory
            .filter(|m| layer && v(&m.rss_bytes) >= 50_000_000)
            .map(|_| s)
    });
    let m = s.memory.unwrap();
    let now = husk::sys::now_ns();
    assert!(
        (now - m.timestamp).abs() < 60_000_000_000,
        "timestamp in ns"
    );
    assert!(v(&m.working_set_bytes) >= 50_000_000, "{m:?}");
    assert!(v(&m.usage_bytes) >= v(&m.working_set_bytes), "{m:?}");
    assert!(v(&m.page_faults) > 1_000, "{m:?}");
    assert!(m.major_page_faults.is_some());
    let w = s.writable_layer.clone().unwrap();
    assert!(v(&w.used_bytes) >= 5_000_000, "{w:?}");
    assert!(v(&w.inodes_used) >= 2, "{w:?}");
    assert!(!w.fs_id.unwrap().mountpoint.is_empty());
    assert!(w.timestamp > 0);
    let attrs = s.attributes.unwrap();
    assert_eq!(attrs.metadata.unwrap().name, "hog");
    assert_eq!(attrs.labels["role"], "mem");

    // CPU: the counter moves, and the second sample gives a rate.
    let c1 = container_stats(h, &burner).await.cpu.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let c2 = container_stats(h, &burner).await.cpu.unwrap();
    let used = v(&c2.usage_core_nano_seconds) - v(&c1.usage_core_nano_seconds);
    assert!(
        used > 100_000_000,
        "a busy loop used {used} ns of CPU in 1 s"
    );
    assert!(c2.timestamp > c1.timestamp);
    let cores = v(&c2.usage_nano_cores);
    assert!(
        cores > 100_000_000 && cores < 2_500_000_000,
        "a busy loop on a 2-core machine: {cores} nanocores"
    );
    let idle_cpu = container_stats(h, &idle).await.cpu.unwrap();
    assert!(v(&idle_cpu.usage_core_nano_seconds) < v(&c2.usage_core_nano_seconds));

    // Filters.
    let all = list_ids(h, ContainerStatsFilter::default()).await;
    assert_eq!(all, sorted(vec![burner.clone(), hog.clone(), idle.clone()]));
    let by_id = ContainerStatsFilter {
        id: burner[..12].to_string(),
        ..Default::default()
    };
    assert_eq!(list_ids(h, by_id).await, vec![burner.clone()]);
    let by_pod = ContainerStatsFilter {
        pod_sandbox_id: pa.clone(),
        ..Default::default()
    };
    assert_eq!(
        list_ids(h, by_pod).await,
        sorted(vec![burner.clone(), hog.clone()])
    );
    let by_label = |pod: &str, role: &str| ContainerStatsFilter {
        pod_sandbox_id: pod.to_string(),
        label_selector: [("role".to_string(), role.to_string())].into(),
        ..Default::default()
    };
    assert_eq!(list_ids(h, by_label("", "mem")).await, vec![hog.clone()]);
    assert!(list_ids(h, by_label(&pb, "mem")).await.is_empty());

    // The pod: its cgroups summed, its containers listed.
    let ps = pod_stats(h, &pa).await;
    assert_eq!(
        ps.attributes
            .as_ref()
            .unwrap()
            .metadata
            .as_ref()
            .unwrap()
            .name,
        "stats-a"
    );
    let l = ps.linux.unwrap();
    assert!(v(&l.cpu.unwrap().usage_core_nano_seconds) >= v(&c2.usage_core_nano_seconds));
    let pm = l.memory.unwrap();
    assert!(
        v(&pm.working_set_bytes) >= 50_000_000,
        "{pm:?} {:?}",
        container_stats(h, &hog).await.memory
    );
    assert!(
        v(&l.process.unwrap().process_count) >= 3,
        "pause, burner, hog"
    );
    let ids = sorted(
        l.containers
            .iter()
            .map(|c| c.attributes.as_ref().unwrap().id.clone())
            .collect(),
    );
    assert_eq!(ids, sorted(vec![burner.clone(), hog.clone()]));
    let list = |f: PodSandboxStatsFilter| async move {
        sorted(
            h.runtime()
                .await
                .list_pod_sandbox_stats(ListPodSandboxStatsRequest { filter: Some(f) })
                .await
                .unwrap()
                .into_inner()
                .stats
                .into_iter()
                .map(|s| s.attributes.unwrap().id)
                .collect(),
        )
    };
    assert_eq!(
        list(PodSandboxStatsFilter::default()).await,
        sorted(vec![pa.clone(), pb.clone()])
    );
    assert_eq!(
        list(PodSandboxStatsFilter {
            id: pb.clone(),
            ..Default::default()
        })
        .await,
        vec![pb.clone()]
    );
    assert_eq!(
        list(PodSandboxStatsFilter {
            label_selector: [("app".to_string(), "stats-a".to_string())].into(),
            ..Default::default()
        })
        .await,
        vec![pa.clone()]
    );

    // Unknown ids.
    let mut rt = h.runtime().await;
    let e = rt
        .container_stats(ContainerStatsRequest {
            container_id: "nonexistent".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);
    let e = rt
        .pod_sandbox_stats(PodSandboxStatsRequest {
            pod_sandbox_id: "nonexistent".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);
    let e = rt
        .container_stats(ContainerStatsRequest {
            container_id: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);

    stop_remove_pod(h, &pa).await;
    stop_remove_pod(h, &pb).await;
    assert!(
        list_ids(h, ContainerStatsFilter::default())
            .await
            .is_empty(),
        "removed containers have no stats"
    );
    assert_eq!(leftovers(&p), Vec::<String>::new());
}

/// Reads `path` from `ip:port` over HTTP/1.0; the answer's length, or
/// None if the server is not there yet.
fn http_fetch(ip: &str, port: u16, path: &str) -> Option<usize> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect((ip, port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
        .ok()?;
    let mut body = Vec::new();
    s.read_to_end(&mut body).ok()?;
    Some(body.len())
}

fn eth0(s: &PodSandboxStats) -> NetworkInterfaceUsage {
    let n = s.linux.as_ref().unwrap().network.clone().unwrap();
    assert!(n.timestamp > 0);
    assert!(n.interfaces.iter().all(|i| i.name != "lo"));
    assert!(n.interfaces.iter().any(|i| i.name == "eth0"));
    n.default_interface.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn pod_network_counters_and_metrics_follow_traffic() {
    if !common::require_root() {
        return;
    }
    let p = setup(vec![]).await;
    let h = &p.h;
    let image = app_image(&p).await;
    let pc = pod_config(&p, "web");
    let pod = run(h, pc.clone()).await.unwrap();
    let ip = status(h, &pod)
        .await
        .unwrap()
        .status
        .unwrap()
        .network
        .unwrap()
        .ip;
    let web = create_start(
        h,
        &pod,
        &pc,
        shell(
            &image,
            "web",
            "mkdir -p /www && head -c 3000000 /dev/zero > /www/big && exec httpd -f -p 8080 -h /www",
            &[],
        ),
    )
    .await;
    let before = eth0(&pod_stats(h, &pod).await);
    assert_eq!(before.name, "eth0");
    let got = wait_for!(20, "httpd in the pod", {
        let ip = ip.clone();
        tokio::task::spawn_blocking(move || http_fetch(&ip, 8080, "/big"))
            .await
            .unwrap()
            .filter(|n| *n > 3_000_000)
    });
    assert!(got > 3_000_000);
    let after = eth0(&pod_stats(h, &pod).await);
    let tx = v(&after.tx_bytes) - v(&before.tx_bytes);
    let rx = v(&after.rx_bytes) - v(&before.rx_bytes);
    assert!(tx >= 3_000_000, "the pod sent the file: tx grew by {tx}");
    assert!(rx > 0, "the pod received the request: rx grew by {rx}");
    assert!(after.rx_errors.is_some() && after.tx_errors.is_some());

    // The same figures as metrics, under the names the descriptors list.
    let mut rt = h.runtime().await;
    let descriptors = rt
        .list_metric_descriptors(ListMetricDescriptorsRequest {})
        .await
        .unwrap()
        .into_inner()
        .descriptors;
    let keys = |name: &str| {
        descriptors
            .iter()
            .find(|d| d.name == name)
            .unwrap_or_else(|| panic!("{name} described"))
            .label_keys
            .clone()
    };
    let pm = rt
        .list_pod_sandbox_metrics(ListPodSandboxMetricsRequest {})
        .await
        .unwrap()
        .into_inner()
        .pod_metrics;
    let pm = pm.iter().find(|m| m.pod_sandbox_id == pod).unwrap();
    for m in pm
        .metrics
        .iter()
        .chain(pm.container_metrics.iter().flat_map(|c| c.metrics.iter()))
    {
        assert_eq!(m.label_values.len(), keys(&m.name).len(), "{m:?}");
    }
    let txm = pm
        .metrics
        .iter()
        .find(|m| {
            m.name == "container_network_transmit_bytes_total"
                && m.label_values.last().map(String::as_str) == Some("eth0")
        })
        .unwrap();
    assert!(v(&txm.value) >= v(&after.tx_bytes));
    assert_eq!(
        txm.label_values[..2],
        ["web".to_string(), "default".to_string()]
    );
    let cm = pm
        .container_metrics
        .iter()
        .find(|c| c.container_id == web)
        .unwrap();
    let ws = cm
        .metrics
        .iter()
        .find(|m| m.name == "container_memory_working_set_bytes")
        .unwrap();
    assert!(v(&ws.value) > 0);
    assert_eq!(ws.label_values[2..4], ["web".to_string(), web.clone()]);

    stop_remove_pod(h, &pod).await;
    assert_eq!(leftovers(&p), Vec::<String>::new());
}

async fn update(
    h: &common::server::Husk,
    id: &str,
    linux: Option<LinuxContainerResources>,
) -> Result<(), tonic::Status> {
    h.runtime()
        .await
        .update_container_resources(UpdateContainerResourcesRequest {
            container_id: id.into(),
            linux,
            ..Default::default()
        })
        .await
        .map(|_| ())
}

#[tokio::test(flavor = "multi_thread")]
async fn resource_updates_reach_the_cgroup_whole_or_not_at_all() {
    if !common::require_root() {
        return;
    }
    let p = setup(vec![]).await;
    let h = &p.h;
    let image = app_image(&p).await;
    let pc = pod_config(&p, "resize");
    let pod = run(h, pc.clone()).await.unwrap();
    let id = create_start(
        h,
        &pod,
        &pc,
        shell(
            &image,
            "app",
            "x=$(yes abcdefgh | head -c 30000000); echo held; while :; do sleep 3600; done",
            &[],
        ),
    )
    .await;
    wait_for!(30, "the container's memory", {
        container_stats(h, &id)
            .await
            .memory
            .filter(|m| v(&m.rss_bytes) >= 25_000_000)
    });

    let r = LinuxContainerResources {
        cpu_period: 50_000,
        cpu_quota: 20_000,
        cpu_shares: 512,
        memory_limit_in_bytes: 200 << 20,
        cpuset_cpus: "0".into(),
        ..Default::default()
    };
    update(h, &id, Some(r)).await.unwrap();
    assert_eq!(cgroup_file(&p, "cpu", &id, "cpu.cfs_period_us"), "50000");
    assert_eq!(cgroup_file(&p, "cpu", &id, "cpu.cfs_quota_us"), "20000");
    assert_eq!(cgroup_file(&p, "cpu", &id, "cpu.shares"), "512");
    assert_eq!(
        cgroup_file(&p, "memory", &id, "memory.limit_in_bytes"),
        (200u64 << 20).to_string()
    );
    assert_eq!(cgroup_file(&p, "cpuset", &id, "cpuset.cpus"), "0");

    // Only memory: the rest stays, on disk and in the status.
    update(
        h,
        &id,
        Some(LinuxContainerResources {
            memory_limit_in_bytes: 300 << 20,
            ..Default::default()
        }),
    )
    .await
    .unwrap();
    assert_eq!(
        cgroup_file(&p, "memory", &id, "memory.limit_in_bytes"),
        (300u64 << 20).to_string()
    );
    assert_eq!(cgroup_file(&p, "cpu", &id, "cpu.cfs_quota_us"), "20000");
    let st = container_status(h, &id).await;
    let res = st.resources.unwrap().linux.unwrap();
    assert_eq!(
        (
            res.cpu_period,
            res.cpu_quota,
            res.cpu_shares,
            res.memory_limit_in_bytes
        ),
        (50_000, 20_000, 512, 300 << 20)
    );
    assert_eq!(res.cpuset_cpus, "0");

    // A limit below what the container holds: refused, and the CPU change
    // of the same request is undone.
    let e = update(
        h,
        &id,
        Some(LinuxContainerResources {
            cpu_shares: 1024,
            memory_limit_in_bytes: 1 << 20,
            ..Default::default()
        }),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    assert_eq!(cgroup_file(&p, "cpu", &id, "cpu.shares"), "512");
    assert_eq!(
        cgroup_file(&p, "memory", &id, "memory.limit_in_bytes"),
        (300u64 << 20).to_string()
    );
    assert_eq!(
        container_status(h, &id)
            .await
            .resources
            .unwrap()
            .linux
            .unwrap()
            .cpu_shares,
        512
    );

    // Bad input.
    for bad in [
        LinuxContainerResources {
            cpu_quota: 10,
            ..Default::default()
        },
        LinuxContainerResources {
            cpuset_cpus: "1-0".into(),
            ..Default::default()
        },
        LinuxContainerResources {
            unified: [("memory.high".to_string(), "1000000".to_string())].into(),
            ..Default::default()
        },
    ] {
        let e = update(h, &id, Some(bad)).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    }
    assert_eq!(
        update(h, &id, None).await.unwrap_err().code(),
        tonic::Code::InvalidArgument
    );
    assert_eq!(
        update(h, "nonexistent", Some(LinuxContainerResources::default()))
            .await
            .unwrap_err()
            .code(),
        tonic::Code::NotFound
    );

    // An exited container cannot be updated.
    h.runtime()
        .await
        .stop_container(StopContainerRequest {
            container_id: id.clone(),
            timeout: 0,
        })
        .await
        .unwrap();
    let e = update(
        h,
        &id,
        Some(LinuxContainerResources {
            cpu_shares: 256,
            ..Default::default()
        }),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");

    stop_remove_pod(h, &pod).await;
    assert_eq!(leftovers(&p), Vec::<String>::new());
}
