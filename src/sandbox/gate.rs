//! How many pods, and how many containers, are made at once.
//!
//! A burst (a kubelet starting a thousand pods at once) must not make the
//! node's work of each wait on all the others. A pod's making runs its CNI
//! plugins, processes of their own: a thousand of them at once, on two
//! CPUs, left every one of them a thousandth of the node, so that each
//! pod took minutes and the kubelet's relists (ListPodSandbox,
//! ListContainers, answered in milliseconds) waited up to 20 s behind them
//! for the server's turn on a CPU. A container's create is mostly the
//! kernel's work under the node's mount lock (`container::gate`). At most
//! twice as many of each as the node has CPUs run at once; the others wait
//! their turn as tasks, before anything is reserved or made, so a caller
//! that gives up while waiting leaves nothing behind.

use std::sync::{Arc, OnceLock};
use tokio::sync::{AcquireError, OwnedSemaphorePermit, Semaphore};

/// The places of one kind of work: twice the node's CPUs.
#[derive(Default)]
pub struct Gate(OnceLock<Arc<Semaphore>>);

impl Gate {
    pub const fn new() -> Gate {
        Gate(OnceLock::new())
    }

    /// Waits for a place. The place is held by whoever holds the permit:
    /// the work's own task, not its caller, so a caller that goes once the
    /// work has begun does not free it early.
    pub async fn place(&'static self) -> Result<OwnedSemaphorePermit, AcquireError> {
        self.0
            .get_or_init(|| {
                let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
                Arc::new(Semaphore::new(2 * cpus))
            })
            .clone()
            .acquire_owned()
            .await
    }
}

/// Waits for a place among the pods being made (RunPodSandbox): taken
/// before its name is reserved, so that a caller gone while it waits
/// leaves nothing; held by the task that makes the pod.
pub async fn pod_place() -> Result<OwnedSemaphorePermit, super::SandboxError> {
    static PODS: Gate = Gate::new();
    PODS.place().await.map_err(|e| {
        super::SandboxError::io("wait for a place among the pods being made")(
            std::io::Error::other(e),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn past_twice_the_cpus_a_place_waits_for_one_to_be_freed() {
        static G: Gate = Gate::new();
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        let mut held = Vec::new();
        for _ in 0..2 * cpus {
            held.push(G.place().await.expect("a place"));
        }
        let wait = tokio::spawn(G.place());
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!wait.is_finished(), "a place past twice the CPUs");
        held.pop();
        let got = tokio::time::timeout(std::time::Duration::from_secs(5), wait).await;
        assert!(matches!(got, Ok(Ok(Ok(_)))), "a freed place is taken");
    }
}
