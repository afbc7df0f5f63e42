//! OOM kills on cgroup v2, counted from `memory.events`: a container over
//! its own limit, a container of a pod over the pod's limit (the kubelet's
//! pod cgroup), and an exec killed in a container.

use super::*;
use common::ctr::{app_image, ccfg, create_start, wait_exited};
use common::pod::{leftovers, run, setup};

/// Allocates far more than any limit here, in one process.
const HOG: &str = "dd if=/dev/zero of=/dev/null bs=256M count=1";

#[tokio::test(flavor = "multi_thread")]
#[ignore = "runs in the node VM (cgroup_v2_node)"]
async fn guest_oom_kills_are_reported() {
    guest();
    let mut p = setup(vec![]).await;
    let parent = kubelet_parent(&mut p);
    let image = app_image(&p).await;

    // The container's own limit.
    let pc = pod_under(&p, "oom", &parent);
    let pod = run(&p.h, pc.clone()).await.unwrap();
    let mut c = ccfg(&image, "own", &["sh", "-c", HOG], &[]);
    c.linux.as_mut().unwrap().resources = Some(LinuxContainerResources {
        memory_limit_in_bytes: 32 << 20,
        memory_swap_limit_in_bytes: 32 << 20,
        ..Default::default()
    });
    let id = create_start(&p.h, &pod, &pc, c).await;
    let st = wait_exited(&p.h, &id).await;
    assert_eq!((st.exit_code, st.reason.as_str()), (137, "OOMKilled"));

    // An exec killed by the OOM killer: its exit code is 137, and the
    // container, once stopped, says why (as containerd reports it).
    let mut c = ccfg(&image, "exec", &["sleep", "3600"], &[]);
    c.linux.as_mut().unwrap().resources = Some(LinuxContainerResources {
        memory_limit_in_bytes: 32 << 20,
        memory_swap_limit_in_bytes: 32 << 20,
        ..Default::default()
    });
    let id = create_start(&p.h, &pod, &pc, c).await;
    let (code, _, _) = sh(&p.h, &id, HOG).await;
    assert_eq!(code, 137);
    p.h.runtime()
        .await
        .stop_container(StopContainerRequest {
            container_id: id.clone(),
            timeout: 1,
        })
        .await
        .unwrap();
    let st = wait_exited(&p.h, &id).await;
    assert_eq!(st.reason, "OOMKilled");

    // A pod over its pod-level limit, which the kubelet sets on the pod's
    // cgroup: its containers have none of their own.
    let pod_parent = format!("{}-pod", parent);
    let d = v2_dir(&pod_parent);
    std::fs::create_dir_all(&d).unwrap();
    let mut enable = Path::new("/sys/fs/cgroup").to_path_buf();
    for part in pod_parent.trim_start_matches('/').split('/') {
        std::fs::write(enable.join("cgroup.subtree_control"), "+memory").unwrap();
        enable.push(part);
    }
    std::fs::write(d.join("memory.max"), (48u64 << 20).to_string()).unwrap();
    let _ = std::fs::write(d.join("memory.swap.max"), "0");
    let mut pc2 = pod_under(&p, "podlimit", &pod_parent);
    pc2.metadata.as_mut().unwrap().uid = "podlimit".into();
    let pod2 = run(&p.h, pc2.clone()).await.unwrap();
    let id = create_start(
        &p.h,
        &pod2,
        &pc2,
        ccfg(&image, "unbounded", &["sh", "-c", HOG], &[]),
    )
    .await;
    let st = wait_exited(&p.h, &id).await;
    assert_eq!(
        (st.exit_code, st.reason.as_str()),
        (137, "OOMKilled"),
        "the pod's limit killed it"
    );
    // The pause lives on.
    let ps = common::pod::status(&p.h, &pod2).await.unwrap();
    assert_eq!(
        ps.status.unwrap().state,
        PodSandboxState::SandboxReady as i32
    );

    common::pod::remove_listed(&p).await;
    assert_eq!(leftovers(&p), Vec::<String>::new());
    for par in [&parent, &pod_parent] {
        assert!(
            child_cgroups(&v2_dir(par)).is_empty(),
            "{par}: {:?}",
            child_cgroups(&v2_dir(par))
        );
    }
    remove_parent(&pod_parent);
    remove_parent(&parent);
}
