//! `runtimeClassName` resolved as the kubelet's RuntimeClass manager does:
//! the RuntimeClass object (node.k8s.io/v1) names the CRI handler that
//! RunPodSandbox is given. A pod without one gets the runtime's default
//! (""). A class that does not exist, or that cannot be read (no API
//! server to ask), fails the sandbox with that reason. Its overhead
//! reaches the pod's cgroup through `spec.overhead`, which the API server
//! sets from the class when the pod is created.

use super::api_volumes::Objects;
use crate::kubelet::kit::api_error::describe;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::node::v1::RuntimeClass;
use kube::Api;

/// The CRI runtime handler for the pod.
pub async fn handler(objects: &Objects, pod: &Pod) -> Result<String, String> {
    let Some(name) = pod
        .spec
        .as_ref()
        .and_then(|s| s.runtime_class_name.as_deref())
        .filter(|n| !n.is_empty())
    else {
        return Ok(String::new());
    };
    let client = objects.client(&format!("RuntimeClass {name:?}"))?;
    match Api::<RuntimeClass>::all(client).get_opt(name).await {
        Ok(Some(rc)) => Ok(rc.handler),
        Ok(None) => Err(format!("RuntimeClass {name:?} not found")),
        Err(e) => Err(format!("RuntimeClass {name:?}: {}", describe(&e))),
    }
}
