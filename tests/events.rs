//! GetContainerEvents on a real husk serve: two subscribers see a whole
//! pod lifecycle in order (a container's own exit included, with no status
//! asked for), with the pod's status and its containers' statuses; under a
//! burst of parallel lifecycles a subscriber that keeps up misses nothing,
//! while one that never reads holds nothing back.
#![allow(clippy::unwrap_used)]

mod common;

use common::ctr::*;
use common::pod::*;
use husk::api::cri::*;
use std::collections::HashMap;
use std::time::Duration;
use tonic::Streaming;

type Ev = ContainerEventType;

async fn subscribe(h: &common::server::Husk) -> Streaming<ContainerEventResponse> {
    h.runtime()
        .await
        .get_container_events(GetEventsRequest {})
        .await
        .unwrap()
        .into_inner()
}

/// The next event, within 20 s.
async fn next(s: &mut Streaming<ContainerEventResponse>) -> ContainerEventResponse {
    tokio::time::timeout(Duration::from_secs(20), s.message())
        .await
        .expect("an event within 20 s")
        .expect("stream ok")
        .expect("stream open")
}

fn kind(e: &ContainerEventResponse) -> Ev {
    Ev::try_from(e.container_event_type).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn two_subscribers_see_a_lifecycle_in_order() {
    if !common::require_root() {
        return;
    }
    let p = setup(vec![]).await;
    let h = &p.h;
    let image = app_image(&p).await;
    let mut subs = [subscribe(h).await, subscribe(h).await];
    let t0 = husk::sys::now_ns();

    let pc = pod_config(&p, "events");
    let pod = run(h, pc.clone()).await.unwrap();
    // Exits on its own: STOPPED must come from the exit, not from a stop.
    let quitter = create_start(
        h,
        &pod,
        &pc,
        shell(&image, "quitter", "sleep 1; exit 3", &[]),
    )
    .await;
    let mut seen: Vec<Vec<ContainerEventResponse>> = vec![Vec::new(), Vec::new()];
    for (i, s) in subs.iter_mut().enumerate() {
        for _ in 0..5 {
            seen[i].push(next(s).await);
        }
    }
    let stopped = &seen[0][4];
    assert_eq!(kind(stopped), Ev::ContainerStoppedEvent);
    assert_eq!(stopped.container_id, quitter);
    let st = stopped
        .containers_statuses
        .iter()
        .find(|c| c.id == quitter)
        .expect("the container's status");
    assert_eq!(st.state, ContainerState::ContainerExited as i32);
    assert_eq!(st.exit_code, 3);

    let mut rt = h.runtime().await;
    rt.remove_container(RemoveContainerRequest {
        container_id: quitter.clone(),
    })
    .await
    .unwrap();
    let sleeper = create_start(h, &pod, &pc, shell(&image, "sleeper", "sleep 3600", &[])).await;
    rt.stop_container(StopContainerRequest {
        container_id: sleeper.clone(),
        timeout: 1,
    })
    .await
    .unwrap();
    rt.remove_container(RemoveContainerRequest {
        container_id: sleeper.clone(),
    })
    .await
    .unwrap();
    stop_remove_pod(h, &pod).await;
    for (i, s) in subs.iter_mut().enumerate() {
        for _ in 0..7 {
            seen[i].push(next(s).await);
        }
    }

    let want = [
        (pod.as_str(), Ev::ContainerCreatedEvent),
        (pod.as_str(), Ev::ContainerStartedEvent),
        (quitter.as_str(), Ev::ContainerCreatedEvent),
        (quitter.as_str(), Ev::ContainerStartedEvent),
        (quitter.as_str(), Ev::ContainerStoppedEvent),
        (quitter.as_str(), Ev::ContainerDeletedEvent),
        (sleeper.as_str(), Ev::ContainerCreatedEvent),
        (sleeper.as_str(), Ev::ContainerStartedEvent),
        (sleeper.as_str(), Ev::ContainerStoppedEvent),
        (sleeper.as_str(), Ev::ContainerDeletedEvent),
        (pod.as_str(), Ev::ContainerStoppedEvent),
        (pod.as_str(), Ev::ContainerDeletedEvent),
    ];
    for got in &seen {
        let got_kinds: Vec<(&str, Ev)> = got
            .iter()
            .map(|e| (e.container_id.as_str(), kind(e)))
            .collect();
        assert_eq!(got_kinds, want);
        let mut last = t0;
        for e in got {
            assert!(e.created_at >= last, "created_at in order, in ns");
            last = e.created_at;
            let ps = e.pod_sandbox_status.as_ref().expect("pod status");
            assert_eq!(ps.id, pod);
            assert_eq!(ps.metadata.as_ref().unwrap().name, "events");
        }
        assert!(last - t0 < 120_000_000_000);
        // A container's CREATED lists it as created; DELETED no longer lists it.
        assert_eq!(
            got[2].containers_statuses[0].state,
            ContainerState::ContainerCreated as i32
        );
        assert!(got[5].containers_statuses.iter().all(|c| c.id != quitter));
        // The sandbox's DELETED still carries its last status.
        assert_eq!(
            got[11].pod_sandbox_status.as_ref().unwrap().state,
            PodSandboxState::SandboxNotready as i32
        );
    }
    assert_eq!(seen[0], seen[1], "both subscribers got the same events");
    assert_eq!(leftovers(&p), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn nothing_lost_under_load_and_an_idle_subscriber_holds_nothing_back() {
    if !common::require_root() {
        return;
    }
    let p = setup(vec![]).await;
    let h = &p.h;
    let image = app_image(&p).await;
    let mut reader = subscribe(h).await;
    // Subscribed, never read.
    let _idle = subscribe(h).await;
    let pcs = [pod_config(&p, "load-a"), pod_config(&p, "load-b")];
    let pods = [
        run(h, pcs[0].clone()).await.unwrap(),
        run(h, pcs[1].clone()).await.unwrap(),
    ];
    const N: usize = 16;
    let mut tasks = Vec::new();
    for i in 0..N {
        let (pod, pc) = (pods[i % 2].clone(), pcs[i % 2].clone());
        let (image, endpoint) = (image.clone(), h.endpoint());
        tasks.push(tokio::spawn(async move {
            let mut rt = husk::api::cri::runtime_service_client::RuntimeServiceClient::new(
                husk::api::connect(&endpoint).await.unwrap(),
            );
            let id = rt
                .create_container(CreateContainerRequest {
                    pod_sandbox_id: pod,
                    config: Some(shell(&image, &format!("c{i}"), "exit 0", &[])),
                    sandbox_config: Some(pc),
                })
                .await
                .unwrap()
                .into_inner()
                .container_id;
            rt.start_container(StartContainerRequest {
                container_id: id.clone(),
            })
            .await
            .unwrap();
            id
        }));
    }
    let mut ids = Vec::new();
    for t in tasks {
        ids.push(t.await.unwrap());
    }
    // Each exits by itself; then all are removed.
    let mut events: HashMap<String, Vec<Ev>> = HashMap::new();
    let count = |events: &HashMap<String, Vec<Ev>>, k: Ev| {
        events.values().filter(|v| v.contains(&k)).count()
    };
    // Sandbox CREATED and STARTED for both pods first.
    for _ in 0..4 {
        let e = next(&mut reader).await;
        assert!(pods.contains(&e.container_id), "{e:?}");
    }
    while count(&events, Ev::ContainerStoppedEvent) < N {
        let e = next(&mut reader).await;
        events
            .entry(e.container_id.clone())
            .or_default()
            .push(kind(&e));
    }
    let mut rt = h.runtime().await;
    for id in &ids {
        rt.remove_container(RemoveContainerRequest {
            container_id: id.clone(),
        })
        .await
        .unwrap();
    }
    while count(&events, Ev::ContainerDeletedEvent) < N {
        let e = next(&mut reader).await;
        events
            .entry(e.container_id.clone())
            .or_default()
            .push(kind(&e));
    }
    assert_eq!(events.len(), N);
    for id in &ids {
        assert_eq!(
            events[id],
            vec![
                Ev::ContainerCreatedEvent,
                Ev::ContainerStartedEvent,
                Ev::ContainerStoppedEvent,
                Ev::ContainerDeletedEvent
            ],
            "events of {id}"
        );
    }
    for pod in &pods {
        stop_remove_pod(h, pod).await;
    }
    assert_eq!(leftovers(&p), Vec::<String>::new());
}
