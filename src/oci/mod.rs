//! The OCI runtime spec pieces that sit below both the spec builder
//! (`container/`) and the cgroup drivers (`cgroup/`), so that neither
//! imports the other.

mod resources;

pub use resources::set_resources;
