//! How many containers are created at once.
//!
//! A container's create is mostly the kernel's work under one lock of the
//! node: its rootfs is mounted, its init's new mount namespace is a copy
//! of the node's whole mount table, its old root is unmounted, and
//! libcontainer reads the table several times, each under the lock that
//! every mount and unmount of the node takes. A burst (a kubelet starting
//! a thousand pods at once) made every create wait on all the others, so
//! each took minutes, past the monitor's 60 s answer time, and failed; and
//! the creates held the server's blocking threads, so that the kubelet's
//! lists waited behind them. At most twice as many creates as the node has
//! CPUs run at once (`sandbox::gate`, as pods are made); the others wait
//! their turn as tasks, before anything is reserved or made, so a caller
//! that gives up while waiting leaves nothing behind.

use crate::sandbox::gate::Gate;
use tokio::sync::{AcquireError, OwnedSemaphorePermit};

static CREATES: Gate = Gate::new();

/// Waits for a place among the container creates. The place is held by
/// the create, not by its caller: a caller that goes once the create has
/// begun does not free it early.
pub async fn create_place() -> Result<OwnedSemaphorePermit, AcquireError> {
    CREATES.place().await
}
