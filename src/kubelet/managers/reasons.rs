//! Why a pod or container is not running: the waiting reason of a failed
//! start (ErrImagePull, CreateContainerConfigError, …), kept per pod and
//! container name until a start succeeds; the status reports it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// Why a container could not be started (its waiting reason).
#[derive(Debug, Clone, PartialEq)]
pub struct StartError {
    pub reason: String,
    pub message: String,
    /// When to try again (None: the usual error requeue).
    pub retry_after: Option<Duration>,
}

/// Waiting reasons of failed starts, per (pod UID, container name); the
/// empty name holds the pod's own (sandbox, volume) failure.
#[derive(Default)]
pub struct ReasonCache(Mutex<HashMap<(String, String), (String, String)>>);

impl ReasonCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), (String, String)>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
    pub fn get(&self, uid: &str, name: &str) -> Option<(String, String)> {
        self.lock()
            .get(&(uid.to_string(), name.to_string()))
            .cloned()
    }
    pub fn set(&self, uid: &str, name: &str, reason: &str, message: &str) {
        self.lock().insert(
            (uid.to_string(), name.to_string()),
            (reason.to_string(), message.to_string()),
        );
    }
    pub fn clear(&self, uid: &str, name: &str) {
        self.lock().remove(&(uid.to_string(), name.to_string()));
    }
    pub fn remove_pod(&self, uid: &str) {
        self.lock().retain(|k, _| k.0 != uid);
    }
}
