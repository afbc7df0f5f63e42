//! The labels and annotations the kubelet puts on sandboxes and containers.
//!
//! They are the kubelet's own keys (so `crictl pods --name`, and any tool
//! that reads them, work as on a real node) plus one husk key naming the
//! node that owns the object: garbage collection and adoption only ever
//! touch objects carrying this node's value, so several kubelets (or tests)
//! can share one runtime.

use std::collections::HashMap;

pub const POD_NAME: &str = "io.kubernetes.pod.name";
pub const POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
pub const POD_UID: &str = "io.kubernetes.pod.uid";
pub const CONTAINER_NAME: &str = "io.kubernetes.container.name";
/// husk: the node (kubelet instance) that owns the sandbox or container.
pub const NODE: &str = "io.husk.kubelet.node";

pub const CONTAINER_HASH: &str = "io.kubernetes.container.hash";
pub const CONTAINER_RESTART_COUNT: &str = "io.kubernetes.container.restartCount";
pub const TERMINATION_MESSAGE_PATH: &str = "io.kubernetes.container.terminationMessagePath";
pub const TERMINATION_MESSAGE_POLICY: &str = "io.kubernetes.container.terminationMessagePolicy";
pub const PRE_STOP_HANDLER: &str = "io.kubernetes.container.preStopHandler";
pub const CONTAINER_PORTS: &str = "io.kubernetes.container.ports";
pub const POD_TERMINATION_GRACE_PERIOD: &str = "io.kubernetes.pod.terminationGracePeriod";
/// husk: whether the container is an init container ("true"/"false").
pub const INIT_CONTAINER: &str = "io.husk.kubelet.init";

pub const CONFIG_SOURCE: &str = "kubernetes.io/config.source";
pub const CONFIG_HASH: &str = "kubernetes.io/config.hash";
pub const CONFIG_SEEN: &str = "kubernetes.io/config.seen";
/// On mirror pods: the config hash of the static pod they mirror.
pub const CONFIG_MIRROR: &str = "kubernetes.io/config.mirror";

/// Labels identifying a pod's objects.
pub fn pod_labels(node: &str, name: &str, namespace: &str, uid: &str) -> HashMap<String, String> {
    HashMap::from([
        (POD_NAME.to_string(), name.to_string()),
        (POD_NAMESPACE.to_string(), namespace.to_string()),
        (POD_UID.to_string(), uid.to_string()),
        (NODE.to_string(), node.to_string()),
    ])
}
