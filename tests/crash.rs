//! Crash consistency: the server (or a pod's shim) is killed with SIGKILL
//! at a sweep of points inside every mutating RPC, many calls in flight.
//! After a restart, whatever the server lists is removed through CRI, and
//! then nothing at all may be left on the host: no mounts, namespace pins,
//! veths, IP leases, cgroups, shims or files. What a killed call half-made
//! is either listed (and so removable) or undone at start, never an
//! unlisted remnant.
#![allow(clippy::unwrap_used)]

mod common;

use common::ctr::*;
use common::pod::*;
use husk::api::cri::*;
use std::time::Duration;

/// Delays after which the server is killed, in ms: from before the first
/// step to after the last, for calls that take 50–500 ms under this load.
const SWEEP_MS: [u64; 7] = [0, 15, 40, 80, 150, 300, 600];

/// A client of its own, for a call in flight while the server dies.
async fn client(
    ep: &str,
) -> husk::api::cri::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel> {
    husk::api::cri::runtime_service_client::RuntimeServiceClient::new(
        husk::api::connect(ep).await.unwrap(),
    )
}

/// Four CreateContainer+StartContainer calls in flight, each on a client
/// of its own.
fn create_and_start_4(
    p: &Pod,
    pod: &str,
    pc: &PodSandboxConfig,
    image: &str,
) -> Vec<tokio::task::JoinHandle<Result<(), tonic::Status>>> {
    (0..4)
        .map(|i| {
            let (ep, pod, pc) = (p.h.endpoint(), pod.to_string(), pc.clone());
            let c = ccfg(image, &format!("c{i}"), &[], &["sleep 3600"]);
            tokio::spawn(async move {
                let mut rt = client(&ep).await;
                let r = rt
                    .create_container(CreateContainerRequest {
                        pod_sandbox_id: pod,
                        config: Some(c),
                        sandbox_config: Some(pc),
                    })
                    .await?;
                rt.start_container(StartContainerRequest {
                    container_id: r.into_inner().container_id,
                })
                .await?;
                Ok(())
            })
        })
        .collect()
}

/// After the removals: nothing left, and a second restart has nothing to undo.
async fn assert_clean(p: &mut Pod, what: &str) {
    // A CNI plugin of the killed server may still be finishing.
    for _ in 0..50 {
        if leftovers(p).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(leftovers(p), Vec::<String>::new(), "{what}\n{}", p.h.log());
}

#[tokio::test(flavor = "multi_thread")]
async fn server_killed_inside_run_pod_sandbox_leaves_nothing_unlisted() {
    if !common::require_root() {
        return;
    }
    let mut p = setup(vec![]).await;
    // The pause image is pulled once, so the sweep kills inside the pod steps.
    let warm = run(&p.h, p.config("warm")).await.unwrap();
    remove_listed(&p).await;
    assert!(!warm.is_empty());
    let mut undone = 0;
    for (round, ms) in SWEEP_MS.iter().enumerate() {
        let calls: Vec<_> = (0..6)
            .map(|i| {
                let (ep, c) = (p.h.endpoint(), p.config(&format!("crash-{round}-{i}")));
                tokio::spawn(async move {
                    let _ = client(&ep)
                        .await
                        .run_pod_sandbox(RunPodSandboxRequest {
                            config: Some(c),
                            runtime_handler: String::new(),
                        })
                        .await;
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(*ms)).await;
        p.h.restart().await;
        for c in calls {
            let _ = c.await;
        }
        undone =
            p.h.log()
                .matches("undoing an unfinished pod sandbox")
                .count();
        for s in list_pods(&p).await {
            assert_eq!(
                status(&p.h, &s.id).await.unwrap().status.unwrap().id,
                s.id,
                "a listed pod has a status"
            );
        }
        remove_listed(&p).await;
        assert_clean(&mut p, &format!("after a kill at {ms} ms")).await;
    }
    // The sweep did hit calls in the middle (not only before or after).
    assert!(undone > 0, "no kill landed inside RunPodSandbox");
    // Nothing is undone twice: a clean restart has nothing to say.
    let before = p.h.log().len();
    p.h.restart().await;
    let log = p.h.log();
    assert!(!log[before..].contains("undoing"), "{}", &log[before..]);
}

#[tokio::test(flavor = "multi_thread")]
async fn server_killed_inside_container_calls_and_pod_teardown() {
    if !common::require_root() {
        return;
    }
    let mut p = setup(vec![]).await;
    let image = app_image(&p).await;
    for (round, ms) in SWEEP_MS.iter().enumerate() {
        // Two pods: one gets containers created and started (and one
        // removed) while the server dies, the other is being stopped and
        // removed.
        let pc = pod_config(&p, &format!("ctr-{round}"));
        let pod = run(&p.h, pc.clone()).await.unwrap();
        let doomed = run(&p.h, p.config(&format!("doomed-{round}")))
            .await
            .unwrap();
        // A running container, removed while the server dies.
        let victim = create_start(
            &p.h,
            &pod,
            &pc,
            ccfg(&image, "victim", &[], &["sleep 3600"]),
        )
        .await;
        let calls = create_and_start_4(&p, &pod, &pc, &image);
        let teardown = {
            let ep = p.h.endpoint();
            tokio::spawn(async move {
                let mut rt = client(&ep).await;
                let mut rt2 = rt.clone();
                let (_, _) = tokio::join!(
                    rt2.remove_container(RemoveContainerRequest {
                        container_id: victim,
                    }),
                    rt.remove_pod_sandbox(RemovePodSandboxRequest {
                        pod_sandbox_id: doomed,
                    })
                );
            })
        };
        tokio::time::sleep(Duration::from_millis(*ms)).await;
        p.h.restart().await;
        for c in calls {
            let _ = c.await;
        }
        let _ = teardown.await;
        remove_listed(&p).await;
        assert_clean(&mut p, &format!("after a kill at {ms} ms")).await;
    }
}

/// Pod and container records are not synced (they mean nothing after a
/// reboot): after a power cut one may be empty or torn. Such a record, at
/// a restart, is discarded with everything it stood for, a running pod and
/// its container included, and the server serves.
#[tokio::test(flavor = "multi_thread")]
async fn records_torn_by_a_power_cut_are_discarded_with_what_they_held() {
    if !common::require_root() {
        return;
    }
    let mut p = setup(vec![]).await;
    let image = app_image(&p).await;
    let pc = pod_config(&p, "torn");
    let pod = run(&p.h, pc.clone()).await.unwrap();
    let c = create_start(&p.h, &pod, &pc, ccfg(&image, "app", &[], &["sleep 3600"])).await;
    let kept = run(&p.h, p.config("kept")).await.unwrap();
    p.h.kill9();
    let root = p.h.root();
    std::fs::write(root.join("sandboxes").join(&pod).join("sandbox.json"), b"").unwrap();
    std::fs::write(
        root.join("containers").join(&c).join("container.json"),
        b"{\"version\": 1, \"id\"",
    )
    .unwrap();
    p.h.spawn().await;
    let listed: Vec<String> = list_pods(&p).await.into_iter().map(|s| s.id).collect();
    assert_eq!(listed, vec![kept.clone()], "{}", p.h.log());
    assert!(
        p.h.log().contains("unreadable sandbox record"),
        "{}",
        p.h.log()
    );
    // The torn pod's network, shim, mounts and cgroups went with it: only
    // the kept pod's remain, and after its removal nothing.
    assert_eq!(p.net.leases(), 1);
    assert_eq!(
        shims_for(&p.h.dir.path().join("run").join("s").join(&pod)),
        0
    );
    remove_listed(&p).await;
    assert_clean(&mut p, "after torn records").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn shim_killed_inside_create_and_start() {
    if !common::require_root() {
        return;
    }
    let mut p = setup(vec![]).await;
    let image = app_image(&p).await;
    for (round, ms) in SWEEP_MS.iter().enumerate() {
        let pc = pod_config(&p, &format!("shimkill-{round}"));
        let pod = run(&p.h, pc.clone()).await.unwrap();
        let shim_pid: i32 =
            std::fs::read_to_string(p.h.dir.path().join("run/s").join(&pod).join("shim.pid"))
                .unwrap()
                .trim()
                .parse()
                .unwrap();
        let calls = create_and_start_4(&p, &pod, &pc, &image);
        tokio::time::sleep(Duration::from_millis(*ms)).await;
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(shim_pid).unwrap(),
            rustix::process::Signal::KILL,
        )
        .unwrap();
        for c in calls {
            // Failures are fine, but they name the shim. (Calls to a dead
            // shim used to wait out their 60 s timeout: a created
            // container's init kept the shim's sockets open.)
            if let Err(e) = c.await.unwrap() {
                assert!(e.message().contains("shim"), "{e:?}");
            }
        }
        // The pod is reported NOTREADY, and the server keeps serving.
        let st = status(&p.h, &pod).await.unwrap().status.unwrap();
        assert_eq!(st.state, PodSandboxState::SandboxNotready as i32);
        remove_listed(&p).await;
        assert_clean(&mut p, &format!("after a shim kill at {ms} ms")).await;
    }
}
