//! A pod's limits on cgroup v2, read back from inside the container and
//! from the node; device access; live updates; stats; bad input.

use super::*;
use common::ctr::{app_image, ccfg, create_start, try_create};
use common::pod::{leftovers, run, setup};
use husk::cgroup::resources::shares_to_weight;

fn limited(image: &str) -> ContainerConfig {
    let mut c = ccfg(image, "limits", &["sleep", "3600"], &[]);
    let hugetlb = read(Path::new("/sys/fs/cgroup/cgroup.controllers")).contains("hugetlb");
    c.linux.as_mut().unwrap().resources = Some(LinuxContainerResources {
        memory_limit_in_bytes: 64 << 20,
        // The kubelet's NoSwap: memory+swap equal to memory.
        memory_swap_limit_in_bytes: 64 << 20,
        cpu_quota: 50_000,
        cpu_period: 100_000,
        cpu_shares: 512,
        cpuset_cpus: "0".into(),
        hugepage_limits: if hugetlb {
            vec![HugepageLimit {
                page_size: "2MB".into(),
                limit: 0,
            }]
        } else {
            vec![]
        },
        // MemoryQoS sends memory.high (and memory.min) this way.
        unified: [
            ("memory.high".to_string(), (48u64 << 20).to_string()),
            ("pids.max".to_string(), "64".to_string()),
        ]
        .into(),
        ..Default::default()
    });
    c
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "runs in the node VM (cgroup_v2_node)"]
async fn guest_limits_devices_updates_and_stats() {
    guest();
    let mut p = setup(vec![]).await;
    let parent = kubelet_parent(&mut p);
    let image = app_image(&p).await;
    let pc = pod_under(&p, "limits", &parent);
    let pod = run(&p.h, pc.clone()).await.unwrap();
    let id = create_start(&p.h, &pod, &pc, limited(&image)).await;
    let host = v2_dir(&format!("{parent}/{id}"));

    // Its own cgroup namespace: the container's cgroup is its root.
    assert_eq!(out(&p.h, &id, "cat /proc/self/cgroup").await, "0::/");
    let listing = out(&p.h, &id, "ls /sys/fs/cgroup").await;
    assert!(
        !listing.contains("kubepods") && listing.contains("memory.max"),
        "the container sees the node's tree: {listing}"
    );
    let mount = out(&p.h, &id, "grep ' /sys/fs/cgroup ' /proc/self/mountinfo").await;
    assert!(
        mount.contains("cgroup2") && mount.contains(" ro,"),
        "{mount}"
    );
    let (code, _, _) = sh(
        &p.h,
        &id,
        "mkdir /sys/fs/cgroup/sub || touch /sys/fs/cgroup/x",
    )
    .await;
    assert_ne!(code, 0, "/sys/fs/cgroup is writable");

    // Every limit, inside and out.
    let weight = shares_to_weight(512).to_string();
    let mut expect = vec![
        ("memory.max", "67108864"),
        ("memory.swap.max", "0"),
        ("memory.high", "50331648"),
        ("cpu.max", "50000 100000"),
        ("cpu.weight", weight.as_str()),
        ("cpuset.cpus", "0"),
        ("pids.max", "64"),
    ];
    if host.join("hugetlb.2MB.max").exists() {
        expect.push(("hugetlb.2MB.max", "0"));
        if host.join("hugetlb.2MB.rsvd.max").exists() {
            expect.push(("hugetlb.2MB.rsvd.max", "0"));
        }
    }
    for (file, want) in &expect {
        assert_eq!(read(&host.join(file)), *want, "{file} on the node");
        let inside = out(&p.h, &id, &format!("cat /sys/fs/cgroup/{file}")).await;
        assert_eq!(inside, *want, "{file} in the container");
    }

    // Devices: v2 has no devices controller; the eBPF program refuses what
    // the container was not given (mknod is allowed, as runc allows it;
    // opening is not). /dev/kmsg opens write-only without a capability.
    let (code, _, err) = sh(
        &p.h,
        &id,
        "mknod /tmp/kmsg c 1 11 && echo husk-device-test > /tmp/kmsg",
    )
    .await;
    assert_ne!(code, 0, "an ungranted device opened");
    assert!(err.contains("Operation not permitted"), "{err}");
    assert_eq!(out(&p.h, &id, "echo ok > /dev/null && echo ok").await, "ok");

    // Updates: memory and CPU, inside and out; shares map as at create.
    let mut rt = p.h.runtime().await;
    rt.update_container_resources(UpdateContainerResourcesRequest {
        container_id: id.clone(),
        linux: Some(LinuxContainerResources {
            memory_limit_in_bytes: 128 << 20,
            memory_swap_limit_in_bytes: 128 << 20,
            cpu_shares: 1024,
            ..Default::default()
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(read(&host.join("memory.max")), "134217728");
    assert_eq!(read(&host.join("cpu.weight")), "100");
    assert_eq!(
        out(&p.h, &id, "cat /sys/fs/cgroup/memory.max").await,
        "134217728"
    );
    let st = common::ctr::container_status(&p.h, &id).await;
    let r = st.resources.unwrap().linux.unwrap();
    assert_eq!((r.memory_limit_in_bytes, r.cpu_shares), (128 << 20, 1024));

    // An update below what the container holds is refused, not an OOM kill.
    out(&p.h, &id, "head -c 30000000 /dev/zero > /dev/shm/held").await;
    let e = rt
        .update_container_resources(UpdateContainerResourcesRequest {
            container_id: id.clone(),
            linux: Some(LinuxContainerResources {
                memory_limit_in_bytes: 8 << 20,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("working set"), "{e:?}");
    assert_eq!(
        read(&host.join("memory.max")),
        "134217728",
        "applied whole or not at all"
    );
    out(&p.h, &id, "rm /dev/shm/held").await;

    // Stats from the v2 files.
    out(
        &p.h,
        &id,
        "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done",
    )
    .await;
    let s = rt
        .container_stats(ContainerStatsRequest {
            container_id: id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .stats
        .unwrap();
    let m = s.memory.unwrap();
    let v = |x: &Option<UInt64Value>| x.as_ref().map(|v| v.value).unwrap_or(0);
    assert!(v(&m.working_set_bytes) > 0 && v(&m.usage_bytes) >= v(&m.working_set_bytes));
    let cpu = s.cpu.unwrap();
    assert!(v(&cpu.usage_core_nano_seconds) > 0);
    // PSI as the kernel has it (cri-api 0.36): totals in ns, the same
    // figures as the container's own pressure files (µs), which only grow.
    let ctr_dir = v2_dir(&format!("{parent}/{id}"));
    if ctr_dir.join("cpu.pressure").exists() {
        let file_total = |f: &str, kind: &str| -> u64 {
            read(&ctr_dir.join(f))
                .lines()
                .find(|l| l.starts_with(kind))
                .and_then(|l| l.split_whitespace().find_map(|x| x.strip_prefix("total=")))
                .unwrap()
                .parse()
                .unwrap()
        };
        for (what, psi, file) in [
            ("cpu", cpu.psi, "cpu.pressure"),
            ("memory", m.psi, "memory.pressure"),
            ("io", s.io.and_then(|i| i.psi), "io.pressure"),
        ] {
            let psi = psi.unwrap_or_else(|| panic!("{what} PSI missing: {s:?}"));
            let some = psi.some.unwrap();
            let after = file_total(file, "some ");
            assert!(
                some.total <= after * 1000 && (some.avg10 >= 0.0 && some.avg10 <= 100.0),
                "{what}: {some:?} vs {after} µs"
            );
            assert!(psi.full.is_some(), "{what}: no full line");
        }
    }
    let ps = rt
        .pod_sandbox_stats(PodSandboxStatsRequest {
            pod_sandbox_id: pod.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .stats
        .unwrap();
    let pl = ps.linux.unwrap();
    assert!(v(&pl.memory.as_ref().unwrap().working_set_bytes) > 0);
    // The pod's pressure is its own cgroup's (its parent), read apart.
    if v2_dir(&parent).join("cpu.pressure").exists() {
        assert!(pl.cpu.unwrap().psi.is_some(), "pod CPU PSI");
        assert!(pl.memory.unwrap().psi.is_some(), "pod memory PSI");
    }
    let metrics = rt
        .list_pod_sandbox_metrics(ListPodSandboxMetricsRequest {})
        .await
        .unwrap()
        .into_inner();
    let names: Vec<String> = metrics
        .pod_metrics
        .iter()
        .flat_map(|pm| pm.container_metrics.iter())
        .flat_map(|cm| cm.metrics.iter().map(|m| m.name.clone()))
        .collect();
    assert!(
        names
            .iter()
            .any(|n| n == "container_memory_working_set_bytes"),
        "{names:?}"
    );
    if host.join("cpu.pressure").exists() {
        assert!(
            names
                .iter()
                .any(|n| n == "container_pressure_cpu_waiting_seconds_total"),
            "PSI: {names:?}"
        );
    }

    // Bad input: nothing is made.
    let before = child_cgroups(&v2_dir(&parent));
    let mut bad = limited(&image);
    bad.metadata.as_mut().unwrap().name = "bad".into();
    let res = bad.linux.as_mut().unwrap().resources.as_mut().unwrap();
    res.unified = [("memory.bogus".to_string(), "1".to_string())].into();
    let e = try_create(&p.h, &pod, &pc, bad).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("memory.bogus"), "{e:?}");
    assert_eq!(
        child_cgroups(&v2_dir(&parent)),
        before,
        "a failed create left a cgroup"
    );
    let mut slice = pod_under(&p, "slice", "kubepods-burstable-pod1.slice");
    slice.metadata.as_mut().unwrap().uid = "slice".into();
    let e = run(&p.h, slice).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("cgroupfs"), "{e:?}");

    common::pod::remove_listed(&p).await;
    assert_eq!(leftovers(&p), Vec::<String>::new());
    assert!(child_cgroups(&v2_dir(&parent)).is_empty());
    remove_parent(&parent);
}
