//! The pod manager: the desired pods (what the sources define), by UID,
//! each with its admission result. Every pod the kubelet acts on is here;
//! a pod not here is, for garbage collection, an orphan.

use super::admission::{self, Rejection};
use k8s_openapi::api::core::v1::Pod;
use std::collections::HashMap;
use std::sync::Arc;

pub struct Desired {
    pub pod: Arc<Pod>,
    pub source: String,
    pub rejection: Option<Rejection>,
}

#[derive(Default)]
pub struct PodManager {
    pods: HashMap<String, Desired>,
}

impl PodManager {
    /// Adds or replaces a pod, admitting it again.
    pub fn upsert(&mut self, uid: &str, pod: Arc<Pod>, source: &str) -> &Desired {
        let rejection = admission::admit(&pod).err();
        self.pods.insert(
            uid.to_string(),
            Desired {
                pod,
                source: source.to_string(),
                rejection,
            },
        );
        &self.pods[uid]
    }

    /// Refuses an admitted pod (a node-level admission: eviction's pressure).
    pub fn reject(&mut self, uid: &str, r: Rejection) {
        if let Some(d) = self.pods.get_mut(uid) {
            d.rejection.get_or_insert(r);
        }
    }

    /// Replaces a pod's object without a new admission (status-only changes).
    pub fn reconcile(&mut self, uid: &str, pod: Arc<Pod>) {
        if let Some(d) = self.pods.get_mut(uid) {
            d.pod = pod;
        }
    }

    pub fn remove(&mut self, uid: &str) -> Option<Desired> {
        self.pods.remove(uid)
    }

    pub fn get(&self, uid: &str) -> Option<&Desired> {
        self.pods.get(uid)
    }

    pub fn uids(&self) -> impl Iterator<Item = &String> {
        self.pods.keys()
    }

    pub fn len(&self) -> usize {
        self.pods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }
}
