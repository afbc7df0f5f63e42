//! `husk shim`: the per-pod monitor.
//!
//! One process per pod, started by `husk serve` but detached from it (it
//! forks, the child calls `setsid`, the parent exits), so that killing or
//! restarting the server never touches a pod. It is single-threaded
//! (libcontainer must not run in a multi-threaded process), runs the pod's
//! containers through libcontainer, is their subreaper, and records each
//! exit atomically to `<dir>/exits/<container>.json`. It serves the API of
//! proto/husk/v1/shim.proto on `<dir>/shim.sock`, whose path it also writes
//! to `<dir>/address`, so a restarted server reattaches.
//!
//! On-disk layout under `<dir>` (the sandbox's state dir):
//! - `shim.sock`, `address`: the API endpoint.
//! - `shim.pid`: the monitor's pid.
//! - `exits/<id>.json`: `{"exit_code", "exited_at"}` per container.
//! - `youki/`: libcontainer's state root.
//! - `oci/<id>.json`: the OCI runtime a container runs under, when not
//!   husk's own path (`oci.rs`); `oci/runtime.log`, its last call's log.

pub mod client;
mod console;
mod delete;
pub mod exec;
mod exec_parts;
pub mod fdpass;
mod fork;
mod lookpath;
pub mod monitor;
mod oci;
mod oci_exec;
mod oom;
mod payload;
pub mod process;
mod reap;
mod runtime;
mod runtime_call;
pub mod sealed;
pub mod spans;
pub mod stream;
pub mod tenant;
pub mod traced;
pub mod v2;
pub mod wire;

/// Whether a runtime keeps state of container `id` in the shim dir `dir`
/// (libcontainer's, the record of the OCI runtime that runs it, or of its
/// shim v2 task): what a shim started after a killed one has to delete.
pub fn has_runtime_state(dir: &std::path::Path, id: &str) -> bool {
    dir.join("youki").join(id).exists()
        || oci::record_path(dir, id).exists()
        || v2::has_record(dir, id)
}

/// Exit record written when a container's init is reaped.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct ExitRecord {
    pub version: u32,
    pub pid: i32,
    /// The exit status, or 128 + signal for a signalled process.
    pub exit_code: i32,
    /// ns since the epoch.
    pub exited_at: i64,
    /// OOM kills seen in the container's cgroup while it ran (`oom.rs`).
    #[serde(default)]
    pub oom_kills: u64,
}
