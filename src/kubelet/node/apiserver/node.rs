//! The Node: registered (or adopted) at start, its Lease in
//! `kube-node-lease` renewed every quarter of its duration (10 s), and its
//! status computed every `node_status_update_frequency`, patched when it
//! changed or every `node_status_report_frequency` otherwise, as the
//! kubelet's node status loop does.
//!
//! Status: addresses (InternalIP, Hostname), capacity and allocatable
//! (cpu, memory, pods, ephemeral-storage; allocatable keeps the kubelet's
//! default hard eviction thresholds back: 100Mi of memory, 10% of the
//! disk), node info, the kubelet endpoint, and the Ready, MemoryPressure,
//! DiskPressure and PIDPressure conditions (Ready from CRI Status and the
//! PLEG's health). A Node deleted behind the kubelet's back is registered
//! again.

use super::{Reporter, Retry};
use crate::kubelet::kit::node_config::Capacity;
use crate::kubelet::kit::runtime::Cri;
use crate::kubelet::kit::settings::Settings;
use crate::kubelet::managers::eviction::EvictionManager;
use crate::kubelet::managers::pleg::Health;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeStatus,
    NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use kube::api::{Api, Patch, PatchParams, PostParams};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The version the node reports as its kubelet's.
pub const KUBELET_VERSION: &str = concat!("v1.28.0-husk.", env!("CARGO_PKG_VERSION"));

const LEASE_NAMESPACE: &str = "kube-node-lease";

fn read_trim(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Millicores as the API prints them: "2", "1500m".
fn milli(m: i64) -> Quantity {
    if m % 1000 == 0 {
        Quantity((m / 1000).to_string())
    } else {
        Quantity(format!("{m}m"))
    }
}

fn ki(bytes: i64) -> Quantity {
    Quantity(format!("{}Ki", bytes.max(0) / 1024))
}

fn os_image() -> String {
    std::fs::read_to_string("/etc/os-release")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_string())
        .unwrap_or_else(|| "Linux".into())
}

pub fn arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

/// The Node object registered at start.
pub fn registration(settings: &Settings) -> Node {
    let mut labels = BTreeMap::new();
    labels.insert("kubernetes.io/hostname".into(), settings.node_name.clone());
    labels.insert("kubernetes.io/os".into(), "linux".into());
    labels.insert("kubernetes.io/arch".into(), arch().into());
    labels.insert("beta.kubernetes.io/os".into(), "linux".into());
    labels.insert("beta.kubernetes.io/arch".into(), arch().into());
    Node {
        metadata: ObjectMeta {
            name: Some(settings.node_name.clone()),
            labels: Some(labels),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn condition(
    kind: &str,
    ok: bool,
    reason: &str,
    message: String,
    now: &Time,
    prev: Option<&NodeStatus>,
) -> NodeCondition {
    let status = if ok { "True" } else { "False" };
    let transition = prev
        .and_then(|p| p.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == kind))
        .filter(|c| c.status == status)
        .and_then(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| now.clone());
    NodeCondition {
        type_: kind.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message),
        last_heartbeat_time: Some(now.clone()),
        last_transition_time: Some(transition),
    }
}

/// What the node reports. `not_ready`: CRI Status's complaints (None: the
/// runtime did not answer).
pub struct Inputs<'a> {
    pub settings: &'a Settings,
    pub node_ip: &'a str,
    pub runtime_version: &'a str,
    pub host: &'a Capacity,
    pub not_ready: Option<&'a [String]>,
    pub pleg_healthy: bool,
    /// The pressure conditions the eviction manager has on.
    pub pressure: &'a HashSet<&'static str>,
}

/// What the node status reads off the kubelet's managers.
#[derive(Clone)]
pub struct Managers {
    pub pleg: Arc<Health>,
    pub eviction: Arc<EvictionManager>,
}

pub fn status(i: &Inputs, prev: Option<&NodeStatus>) -> NodeStatus {
    let now = crate::kubelet::kit::defaults::now();
    let h = i.host;
    let mut capacity = BTreeMap::new();
    capacity.insert("cpu".to_string(), milli(h.cpu_milli));
    capacity.insert("memory".to_string(), ki(h.memory));
    capacity.insert(
        "pods".to_string(),
        Quantity(i.settings.max_pods.to_string()),
    );
    capacity.insert("ephemeral-storage".to_string(), ki(h.ephemeral_storage));
    let reserved = i.settings.kube_reserved.plus(&i.settings.system_reserved);
    let alloc = h.allocatable(&reserved, &i.settings.eviction.hard);
    let mut allocatable = capacity.clone();
    allocatable.insert("cpu".into(), milli(alloc.cpu_milli));
    allocatable.insert("memory".into(), ki(alloc.memory));
    allocatable.insert("ephemeral-storage".into(), ki(alloc.ephemeral_storage));
    let (ready, message) = match i.not_ready {
        None => (false, "container runtime is down".to_string()),
        Some([]) if i.pleg_healthy => (true, "kubelet is posting ready status".to_string()),
        Some([]) => (false, "PLEG is not healthy".to_string()),
        Some(why) => (
            false,
            format!("container runtime not ready: {}", why.join("; ")),
        ),
    };
    let memory_pressure = i.pressure.contains("MemoryPressure");
    let disk_pressure = i.pressure.contains("DiskPressure");
    let pid_pressure = i.pressure.contains("PIDPressure");
    let pressure = |kind: &str, on: bool| {
        let (reason, message) = match (kind, on) {
            ("MemoryPressure", true) => (
                "KubeletHasInsufficientMemory",
                "kubelet has insufficient memory available",
            ),
            ("MemoryPressure", false) => (
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            ),
            ("DiskPressure", true) => ("KubeletHasDiskPressure", "kubelet has disk pressure"),
            ("DiskPressure", false) => ("KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            (_, true) => (
                "KubeletHasInsufficientPID",
                "kubelet has insufficient PID available",
            ),
            (_, false) => (
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available",
            ),
        };
        // A pressure condition is "True" when under pressure.
        let mut c = condition(kind, on, reason, message.into(), &now, prev);
        c.status = if on { "True" } else { "False" }.into();
        c
    };
    let conditions = vec![
        pressure("MemoryPressure", memory_pressure),
        pressure("DiskPressure", disk_pressure),
        pressure("PIDPressure", pid_pressure),
        condition(
            "Ready",
            ready,
            if ready {
                "KubeletReady"
            } else {
                "KubeletNotReady"
            },
            message,
            &now,
            prev,
        ),
    ];
    let mut addresses = vec![NodeAddress {
        type_: "InternalIP".into(),
        address: i.node_ip.into(),
    }];
    addresses.push(NodeAddress {
        type_: "Hostname".into(),
        address: i.settings.node_name.clone(),
    });
    NodeStatus {
        addresses: Some(addresses),
        allocatable: Some(allocatable),
        capacity: Some(capacity),
        conditions: Some(conditions),
        daemon_endpoints: Some(NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint {
                port: i.settings.port as i32,
            }),
        }),
        node_info: Some(NodeSystemInfo {
            architecture: arch().into(),
            boot_id: read_trim("/proc/sys/kernel/random/boot_id"),
            container_runtime_version: i.runtime_version.into(),
            kernel_version: rustix::system::uname()
                .release()
                .to_string_lossy()
                .into_owned(),
            kube_proxy_version: String::new(),
            kubelet_version: KUBELET_VERSION.into(),
            machine_id: read_trim("/etc/machine-id"),
            operating_system: "linux".into(),
            os_image: os_image(),
            system_uuid: read_trim("/sys/class/dmi/id/product_uuid"),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Equal but for heartbeat times.
fn same(a: &NodeStatus, b: &NodeStatus) -> bool {
    let strip = |s: &NodeStatus| {
        let mut s = s.clone();
        for c in s.conditions.iter_mut().flatten() {
            c.last_heartbeat_time = None;
        }
        s
    };
    strip(a) == strip(b)
}

/// Registers the node (or adopts the one there); returns its UID.
async fn register(nodes: &Api<Node>, settings: &Settings) -> Result<String, kube::Error> {
    let want = registration(settings);
    let node = match nodes.create(&PostParams::default(), &want).await {
        Ok(n) => {
            tracing::info!(node = %settings.node_name, "node registered");
            n
        }
        Err(e) if super::code(&e) == Some(409) => {
            let labels = serde_json::json!({"metadata": {"labels": want.metadata.labels}});
            let n = nodes
                .patch(
                    &settings.node_name,
                    &PatchParams::default(),
                    &Patch::Merge(labels),
                )
                .await?;
            tracing::info!(node = %settings.node_name, "adopted the registered node");
            n
        }
        Err(e) => return Err(e),
    };
    Ok(node.metadata.uid.unwrap_or_default())
}

fn lease(settings: &Settings, node_uid: &str) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(settings.node_name.clone()),
            namespace: Some(LEASE_NAMESPACE.into()),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: settings.node_name.clone(),
                uid: node_uid.into(),
                ..Default::default()
            }]),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(settings.node_name.clone()),
            lease_duration_seconds: Some(settings.node_lease_duration_secs),
            renew_time: Some(MicroTime(crate::kubelet::kit::defaults::now().0)),
            ..Default::default()
        }),
    }
}

async fn renew(
    leases: &Api<Lease>,
    settings: &Settings,
    node_uid: &str,
) -> Result<(), kube::Error> {
    let want = lease(settings, node_uid);
    let patch = serde_json::json!({"spec": want.spec});
    match leases
        .patch(
            &settings.node_name,
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if super::code(&e) == Some(404) => leases
            .create(&PostParams::default(), &want)
            .await
            .map(|_| ()),
        Err(e) => Err(e),
    }
}

/// The node task: runs until aborted. The node's UID goes to `uid_tx`
/// once registered (mirror pods and leases name it as their owner).
pub async fn run(
    client: kube::Client,
    settings: Settings,
    node_ip: String,
    cri: Cri,
    managers: Managers,
    uid_tx: watch::Sender<Option<String>>,
) {
    let nodes: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client, LEASE_NAMESPACE);
    let runtime_version = format!("{}://{}", cri.name, cri.version);
    let mut rep = Reporter::new("node");
    let mut lease_rep = Reporter::new("node lease");
    let mut retry = Retry::default();
    let mut uid: Option<String> = None;
    let mut reported: Option<(NodeStatus, Instant)> = None;
    let period = settings
        .node_status_update_frequency
        .min(Duration::from_secs(
            (settings.node_lease_duration_secs / 4).max(1) as u64,
        ));
    loop {
        let Some(node_uid) = uid.clone() else {
            match register(&nodes, &settings).await {
                Ok(u) => {
                    rep.ok();
                    retry.reset();
                    let _ = uid_tx.send(Some(u.clone()));
                    uid = Some(u);
                    reported = None;
                }
                Err(e) => {
                    rep.failed(&super::describe(&e));
                    tokio::time::sleep(retry.delay()).await;
                }
            }
            continue;
        };
        match renew(&leases, &settings, &node_uid).await {
            Ok(()) => lease_rep.ok(),
            Err(e) => lease_rep.failed(&super::describe(&e)),
        }
        let not_ready = cri.not_ready().await.ok();
        let host = Capacity::read(&settings.root);
        let pressure = managers.eviction.conditions();
        let inputs = Inputs {
            settings: &settings,
            node_ip: &node_ip,
            runtime_version: &runtime_version,
            host: &host,
            not_ready: not_ready.as_deref(),
            pleg_healthy: managers.pleg.healthy(),
            pressure: &pressure,
        };
        let st = status(&inputs, reported.as_ref().map(|r| &r.0));
        let due = reported.as_ref().is_none_or(|(prev, at)| {
            !same(prev, &st) || at.elapsed() >= settings.node_status_report_frequency
        });
        if !due {
            // The Node may have been deleted behind the kubelet's back.
            match nodes.get_opt(&settings.node_name).await {
                Ok(Some(_)) => rep.ok(),
                Ok(None) => {
                    tracing::warn!(node = %settings.node_name, "the Node is gone from the API server; registering again");
                    uid = None;
                    continue;
                }
                Err(e) => rep.failed(&super::describe(&e)),
            }
        }
        if due {
            let patch = serde_json::json!({"status": st});
            match nodes
                .patch_status(
                    &settings.node_name,
                    &PatchParams::default(),
                    &Patch::Merge(patch),
                )
                .await
            {
                Ok(_) => {
                    rep.ok();
                    reported = Some((st, Instant::now()));
                }
                Err(e) if super::code(&e) == Some(404) => {
                    tracing::warn!(node = %settings.node_name, "the Node is gone from the API server; registering again");
                    uid = None;
                    continue;
                }
                Err(e) => rep.failed(&super::describe(&e)),
            }
        }
        tokio::time::sleep(period).await;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn host() -> Capacity {
        Capacity {
            cpu_milli: 2000,
            memory: 4 << 30,
            ephemeral_storage: 100 << 30,
            pids: 1000,
        }
    }

    fn cond<'a>(st: &'a NodeStatus, kind: &str) -> &'a NodeCondition {
        st.conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == kind)
            .unwrap()
    }

    #[test]
    fn status_reports_capacity_conditions_and_info() {
        let s = Settings::new("unix:///x");
        let h = host();
        let ok: Vec<String> = Vec::new();
        let i = Inputs {
            settings: &s,
            node_ip: "10.1.2.3",
            runtime_version: "husk://0.1.0",
            host: &h,
            not_ready: Some(&ok),
            pleg_healthy: true,
            pressure: &HashSet::new(),
        };
        let st = status(&i, None);
        let cap = st.capacity.as_ref().unwrap();
        assert_eq!(cap["cpu"].0, "2");
        assert_eq!(cap["memory"].0, format!("{}Ki", 4 << 20));
        assert_eq!(cap["pods"].0, "110");
        let alloc = st.allocatable.as_ref().unwrap();
        assert_eq!(alloc["memory"].0, format!("{}Ki", (4 << 20) - (100 << 10)));
        assert_eq!(cond(&st, "Ready").status, "True");
        assert_eq!(cond(&st, "Ready").reason.as_deref(), Some("KubeletReady"));
        assert_eq!(cond(&st, "MemoryPressure").status, "False");
        assert_eq!(
            cond(&st, "DiskPressure").reason.as_deref(),
            Some("KubeletHasNoDiskPressure")
        );
        assert_eq!(st.addresses.as_ref().unwrap()[0].address, "10.1.2.3");
        let info = st.node_info.as_ref().unwrap();
        assert_eq!(info.container_runtime_version, "husk://0.1.0");
        assert_eq!(info.kubelet_version, KUBELET_VERSION);
        assert_eq!(
            st.daemon_endpoints.unwrap().kubelet_endpoint.unwrap().port,
            10250
        );
    }

    #[test]
    fn not_ready_and_pressure_and_transition_times() {
        let s = Settings::new("unix:///x");
        let h = host();
        let bad = vec!["NetworkReady=false reason:NoCNI message:none".to_string()];
        let i = Inputs {
            settings: &s,
            node_ip: "10.1.2.3",
            runtime_version: "husk://0.1.0",
            host: &h,
            not_ready: Some(&bad),
            pleg_healthy: true,
            pressure: &HashSet::from(["MemoryPressure", "DiskPressure"]),
        };
        let st = status(&i, None);
        assert_eq!(cond(&st, "Ready").status, "False");
        assert!(cond(&st, "Ready")
            .message
            .as_ref()
            .unwrap()
            .contains("NetworkReady=false"));
        assert_eq!(cond(&st, "MemoryPressure").status, "True");
        assert_eq!(cond(&st, "DiskPressure").status, "True");
        // Unchanged conditions keep their transition time.
        let old: Time = serde_json::from_str("\"2020-01-01T00:00:00Z\"").unwrap();
        let mut prev = st.clone();
        for c in prev.conditions.iter_mut().flatten() {
            c.last_transition_time = Some(old.clone());
        }
        let again = status(&i, Some(&prev));
        assert_eq!(
            cond(&again, "Ready").last_transition_time,
            Some(old.clone())
        );
        assert!(same(&prev, &again));
        // A changed condition gets a new transition time.
        let ok: Vec<String> = Vec::new();
        let fixed = Inputs {
            not_ready: Some(&ok),
            ..i
        };
        let up = status(&fixed, Some(&prev));
        assert_eq!(cond(&up, "Ready").status, "True");
        assert_ne!(cond(&up, "Ready").last_transition_time, Some(old));
        assert!(!same(&prev, &up));
        let down = Inputs {
            not_ready: None,
            ..fixed
        };
        assert_eq!(
            cond(&status(&down, None), "Ready").message.as_deref(),
            Some("container runtime is down")
        );
    }
}
