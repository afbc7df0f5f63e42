//! What a pod asks of the runtime, in CRI terms: the sandbox config
//! (`sandbox_config`), each container's config (`container_config`) with
//! its environment (`env`, `service_env`), its volumes (`volumes` for
//! hostPath and emptyDir, `api_volumes` with `atomic_writer` for secrets,
//! config maps, the downward API and tokens) and the credentials of its
//! pulls (`pull_secrets`). Built from the kit; no manager or loop here.

pub mod api_volumes;
pub mod atomic_writer;
pub mod container_config;
pub mod downward;
pub mod env;
pub mod inputs;
pub mod pull_secrets;
pub mod runtime_class;
pub mod sandbox_config;
pub mod service_env;
pub mod subpath;
pub mod volumes;
