//! `husk bench pod-startup`: pod startup latency as the SIG-scalability
//! SLO measures it, on one or more nodes of a real cluster, side by side.
//!
//! Each round, for each node (alternating who goes first), a Deployment
//! of `--replicas` pods pinned to that node (`kubernetes.io/hostname`) is
//! created; a watch on its pods records, per pod, when the pod was first
//! seen (its creation: the watch delivers it within milliseconds, where
//! `creationTimestamp` has only seconds) and when it was first seen
//! Running with Ready=True. The Deployment is deleted and its pods waited
//! out before the next one. The report gives p50/p90/p99 per node over
//! every pod of every round (the SLO: p99 ≤ 5 s for stateless pods with
//! pulled images), the ratio of p99s against the first node, and the
//! machine's load.

use super::{loadavg, ratio, summarize, turns, Summary};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::watcher::{self, Event};
use serde::Serialize;
use std::collections::HashMap;
use std::time::{Duration, Instant};

pub struct Args {
    pub kubeconfig: std::path::PathBuf,
    pub nodes: Vec<String>,
    pub replicas: usize,
    pub rounds: usize,
    pub image: String,
    pub namespace: String,
    pub json: bool,
}

#[derive(Debug, Serialize)]
pub struct NodeResult {
    pub node: String,
    pub startup: Summary,
    /// Seconds from the Deployment's creation to its last pod Ready, per round.
    pub all_ready_s: Vec<f64>,
}

fn deployment(name: &str, node: &str, replicas: usize, image: &str) -> anyhow::Result<Deployment> {
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "app", "image": image, "imagePullPolicy": "IfNotPresent",
                                    "command": ["/bin/sleep", "3600"]}]
                }
            }
        }
    }))?)
}

fn ready(p: &Pod) -> bool {
    let st = p.status.as_ref();
    st.and_then(|s| s.phase.as_deref()) == Some("Running")
        && st
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// One Deployment on one node: (per-pod startup latencies, all-ready time).
async fn round(
    client: &kube::Client,
    a: &Args,
    node: &str,
    name: &str,
) -> anyhow::Result<(Vec<Duration>, Duration)> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &a.namespace);
    let deps: Api<Deployment> = Api::namespaced(client.clone(), &a.namespace);
    let cfg = watcher::Config::default().labels(&format!("app={name}"));
    let mut stream = watcher::watcher(pods.clone(), cfg).boxed();
    // The watch is established (its initial, empty list done) before the create.
    loop {
        match tokio::time::timeout(Duration::from_secs(30), stream.next()).await {
            Ok(Some(Ok(Event::InitDone))) => break,
            Ok(Some(_)) => continue,
            _ => anyhow::bail!("the pod watch did not start"),
        }
    }
    let started = Instant::now();
    deps.create(
        &PostParams::default(),
        &deployment(name, node, a.replicas, &a.image)?,
    )
    .await?;
    let mut seen: HashMap<String, Instant> = HashMap::new();
    let mut done: HashMap<String, Duration> = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(300);
    while done.len() < a.replicas {
        let left = deadline.saturating_duration_since(Instant::now());
        let ev = match tokio::time::timeout(left, stream.next()).await {
            Ok(Some(Ok(ev))) => ev,
            Ok(Some(Err(e))) => {
                tracing::warn!(error = %e, "pod watch error");
                continue;
            }
            _ => anyhow::bail!(
                "{node}: {} of {} pods Ready after 300 s",
                done.len(),
                a.replicas
            ),
        };
        let (Event::Apply(p) | Event::InitApply(p)) = ev else {
            continue;
        };
        let uid = p.metadata.uid.clone().unwrap_or_default();
        let first = *seen.entry(uid.clone()).or_insert_with(Instant::now);
        if ready(&p) && !done.contains_key(&uid) {
            done.insert(uid, first.elapsed());
        }
    }
    let all = started.elapsed();
    deps.delete(name, &DeleteParams::foreground()).await?;
    // Wait until the pods are gone, so the next round starts clean.
    let gone_by = Instant::now() + Duration::from_secs(120);
    while Instant::now() < gone_by {
        let left = pods
            .list(&kube::api::ListParams::default().labels(&format!("app={name}")))
            .await?;
        if left.items.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok((done.into_values().collect(), all))
}

pub async fn run(a: Args) -> anyhow::Result<()> {
    anyhow::ensure!(!a.nodes.is_empty(), "--nodes: give at least one node");
    anyhow::ensure!(!a.image.is_empty(), "--image is required");
    let (client, _, _) = crate::kubelet::node::apiserver::connect(&a.kubeconfig, false).await?;
    let load_before = loadavg();
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); a.nodes.len()];
    let mut all: Vec<Vec<f64>> = vec![Vec::new(); a.nodes.len()];
    let tag = format!("{:06x}", rand::random::<u32>() & 0xff_ffff);
    for r in 0..a.rounds {
        for i in turns(r, a.nodes.len()) {
            let node = &a.nodes[i];
            let name = format!("startup-{tag}-{i}-{r}");
            let (s, t) = round(&client, &a, node, &name).await?;
            if !a.json {
                let sum = summarize(&s);
                eprintln!(
                    "round {r} {node}: p50 {:.0} ms, p99 {:.0} ms, all Ready in {:.1} s",
                    sum.p50_ms,
                    sum.p99_ms,
                    t.as_secs_f64()
                );
            }
            samples[i].extend(s);
            all[i].push(t.as_secs_f64());
        }
    }
    let results: Vec<NodeResult> = a
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| NodeResult {
            node: n.clone(),
            startup: summarize(&samples[i]),
            all_ready_s: all[i].clone(),
        })
        .collect();
    let load_after = loadavg();
    if a.json {
        let v = serde_json::json!({"pod_startup": results, "load_before": load_before, "load_after": load_after,
                                   "replicas": a.replicas, "rounds": a.rounds});
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "pod startup latency (created → Running and Ready, seen through a watch), {} pods × {} rounds per node",
        a.replicas, a.rounds
    );
    println!(
        "{:<28} {:>8} {:>8} {:>8} {:>10}",
        "node", "p50 ms", "p90 ms", "p99 ms", "p99 ratio"
    );
    let base = results.first().map(|r| r.startup.p99_ms).unwrap_or(0.0);
    for r in &results {
        println!(
            "{:<28} {:>8.0} {:>8.0} {:>8.0} {:>10.2}",
            r.node,
            r.startup.p50_ms,
            r.startup.p90_ms,
            r.startup.p99_ms,
            ratio(r.startup.p99_ms, base)
        );
    }
    println!("load: before {load_before}, after {load_after}");
    Ok(())
}
