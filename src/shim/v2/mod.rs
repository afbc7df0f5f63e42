//! Containers of a containerd shim v2 runtime (`type = "shim"` handlers:
//! containerd-shim-runc-v2, Kata, gVisor's runsc shim, runwasi), driven
//! from the pod's monitor as containerd drives them. The monitor stays
//! what it is for every pod (the CRI log, attach, exits on disk); the
//! runtime's shim runs the processes:
//! - `start.rs`: its binary's `start` (and `delete` after it died);
//! - `client.rs`: its Task API over ttrpc;
//! - `events.rs`: the events endpoint it publishes to (`TTRPC_ADDRESS`:
//!   `<dir>/ev.sock`), where exits and OOM kills arrive;
//! - `options.rs`: the handler's options as the shim's typed Any;
//! - `adopt.rs`: each task's record, by which a monitor started after a
//!   killed one ends what that one left;
//! - `task.rs`: create, start, kill, delete through it; `exec.rs`: execs;
//!   `told.rs`: what it tells, and its death; `resources.rs`: Update and
//!   Stats through it (`metrics.rs` reads the latter).
//!
//! Stdio goes through FIFOs under `<dir>/v2io/<id>/`, whose read ends the
//! monitor holds as it holds a container's pipes. A pod's tasks share one
//! shim when it groups them (the runc shim by the sandbox id); the shim's
//! own log (the `log` FIFO in the bundle it was started from) goes to the
//! monitor's `shim.log`.

mod adopt;
pub mod client;
pub mod events;
mod exec;
mod fifo;
pub mod metrics;
pub mod options;
mod resources;
pub mod start;
mod task;
mod told;

use crate::api::shim::ShimV2;
use crate::shim::runtime_call::Failure;
pub use adopt::has_record;
use client::CallError;
use std::collections::{BTreeSet, HashMap};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::time::Duration;

const INTERNAL: i32 = 13;

fn internal(what: &str) -> impl Fn(std::io::Error) -> Failure + '_ {
    move |e| (INTERNAL, format!("{what}: {e}"))
}

/// A failed call as the shim API's code: what the runtime refused
/// (containerd's Unknown, Internal) is FailedPrecondition, as a failed OCI
/// runtime is.
fn call_failure(what: &str, e: CallError) -> Failure {
    let code = match e.code() {
        2 | 13 => 9,
        c => c,
    };
    (code, format!("{what}: {e}"))
}

/// Removes the socket file of a shim that is ending or gone (its
/// connections stay; a shim removes its own only on a clean exit).
fn remove_socket(address: &str) {
    if let Some(p) = address.strip_prefix("unix://") {
        let _ = std::fs::remove_file(p);
    }
}

fn any(type_url: &str, value: Vec<u8>) -> prost_types::Any {
    prost_types::Any {
        type_url: type_url.into(),
        value,
    }
}

/// One container run by a shim.
pub(super) struct Task {
    /// The shim's address ("" once the shim is gone).
    address: String,
    bundle: PathBuf,
    /// Its FIFOs' dir.
    io: PathBuf,
    binary: PathBuf,
    runtime: ShimV2,
    timeout: Duration,
    oom_kills: u64,
    /// Left by a killed monitor (and killed when adopted).
    adopted: bool,
}

/// One running shim.
struct Conn {
    client: client::Client,
    version: i32,
    /// Its server's pid (from Connect), a child of this monitor once the
    /// `start` that spawned it exited; 0 when not told.
    pid: i32,
    tasks: BTreeSet<String>,
    /// Its `log` FIFO, held open both ways.
    log: Option<OwnedFd>,
}

/// The monitor's shim v2 state.
#[derive(Default)]
pub struct State {
    events: Option<events::Events>,
    conns: HashMap<String, Conn>,
    tasks: HashMap<String, Task>,
    /// Execs in flight: exec id → (container, FIFO dir).
    execs: HashMap<String, (String, PathBuf)>,
}

impl State {
    /// Whether a shim runs container `id`.
    pub fn has(&self, id: &str) -> bool {
        self.tasks.contains_key(id)
    }

    /// What the loop polls: the events endpoint's wake pipe.
    pub fn poll_fds(&self) -> Vec<BorrowedFd<'_>> {
        self.events.as_ref().map(|e| e.fds()).unwrap_or_default()
    }
}
