//! Pod sandboxes: a pause container in the pod's namespaces, watched by the
//! pod's `husk shim`, attached to the network by CNI.
//!
//! On disk, per sandbox `<id>`:
//! - `<root>/sandboxes/<id>/sandbox.json`: the record (versioned, atomic);
//!   `config.pb`: the PodSandboxConfig as sent; `resolv.conf`, `hostname`,
//!   `hosts`: files the pod's containers share; `bundle/` (config.json,
//!   rootfs = overlay of the pause image, `upper`, `work`).
//! - `<state>/s/<id>/`: the shim's dir (socket, address, exits).
//! - `<state>/ns/<id>/{net,ipc,uts}`: pinned namespaces; `<root>/sandboxes/<id>/shm`: the pod's /dev/shm.
//! - A spare: the shim and namespaces of an id no pod has taken yet, made
//!   ahead for the next pod (`spare.rs`); it has no `<root>/sandboxes/<id>`.
//!
//! RunPodSandbox is transactional: each step pushes its undo on a stack,
//! and a failure unwinds the stack in reverse, so nothing half-made stays.
//! A server killed mid-way leaves no record; what it did is undone at the
//! next start (`recover.rs`).

pub mod files;
pub mod gate;
pub mod handlers;
pub mod manager;
mod pause;
pub mod podns;
mod recover;
mod resize;
pub mod rootfs;
mod run;
pub(crate) mod shim_call;
mod spare;
pub mod spec;
mod teardown;
mod undo;
pub mod userns;
pub mod validate;

pub use manager::SandboxManager;

/// Errors of sandbox operations.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("{0}")]
    Invalid(String),
    /// Well-formed, but asks for what husk does not have yet.
    #[error("{0}")]
    Unsupported(String),
    /// What was not found, said whole ("pod sandbox x not found").
    #[error("{0}")]
    NotFound(String),
    #[error("failed to reserve sandbox name {name:?}: name is reserved for {id}")]
    NameReserved { name: String, id: String },
    #[error(transparent)]
    Image(#[from] crate::image::ImageError),
    #[error(transparent)]
    Cni(#[from] crate::network::cni::CniError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("shim: {0}")]
    Shim(String),
    /// A tree the pod's user namespace needs idmapped that this node
    /// cannot idmap.
    #[error(transparent)]
    Idmap(#[from] crate::idmap::IdmapError),
    /// A directory the pod's unprivileged users must reach, and cannot.
    #[error("{0}")]
    Unreachable(String),
    #[error(transparent)]
    Resources(#[from] crate::cgroup::resources::ResourceError),
    #[error("{0}")]
    Timeout(String),
    /// The container or process is not in a state the request needs.
    #[error("{0}")]
    NotRunning(String),
    /// The runtime refused what the request asked: an OCI runtime failed
    /// it, or the process's executable is missing or not runnable.
    #[error("{0}")]
    Refused(String),
}

impl SandboxError {
    pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> SandboxError {
        let what = what.into();
        move |source| SandboxError::Io { what, source }
    }
}
