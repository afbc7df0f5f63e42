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

    /// The node's `pods` capacity, as the kubelet's resource fit: a new
    /// pod is refused (`OutOfpods`) while `max_pods` other admitted pods
    /// are not yet terminal.
    pub fn fits(
        &self,
        uid: &str,
        max_pods: i64,
        terminal: impl Fn(&str) -> bool,
    ) -> Result<(), Rejection> {
        let used = self
            .pods
            .iter()
            .filter(|(id, d)| id.as_str() != uid && d.rejection.is_none() && !terminal(id))
            .count() as i64;
        if used < max_pods {
            return Ok(());
        }
        Err(Rejection {
            reason: "OutOfpods".into(),
            message: format!(
                "Node didn't have enough resource: pods, requested: 1, used: {used}, capacity: {max_pods}"
            ),
        })
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn pod(name: &str) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "default", "uid": name},
                "spec": {"containers": [{"name": "c", "image": "i"}]}
            }))
            .unwrap(),
        )
    }

    #[test]
    fn a_pod_past_the_capacity_is_out_of_pods_and_terminal_ones_do_not_count() {
        let mut m = PodManager::default();
        for n in ["a", "b"] {
            assert!(m.upsert(n, pod(n), "file").rejection.is_none());
            assert_eq!(m.fits(n, 2, |_| false), Ok(()), "{n} fits");
        }
        m.upsert("c", pod("c"), "file");
        let r = m.fits("c", 2, |_| false).unwrap_err();
        assert_eq!(r.reason, "OutOfpods");
        assert_eq!(
            r.message,
            "Node didn't have enough resource: pods, requested: 1, used: 2, capacity: 2"
        );
        m.reject("c", r);
        // A refused pod holds no place; a finished one neither.
        m.upsert("d", pod("d"), "file");
        assert!(m.fits("d", 2, |_| false).is_err());
        assert_eq!(m.fits("d", 2, |id| id == "a"), Ok(()));
    }
}
