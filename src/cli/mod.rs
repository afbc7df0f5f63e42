//! Client-side commands: they talk to a running runtime over its socket.

pub mod check;
pub mod config_import;
mod config_nri;
mod config_runtimes;
pub mod images;
pub mod kubelet;
pub mod node_flags;
pub mod run;
pub mod serve_flags;
pub mod stream;

/// The default runtime endpoint.
pub const DEFAULT_ENDPOINT: &str = "unix:///run/husk/husk.sock";
