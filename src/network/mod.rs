//! Pod networking: network namespaces pinned by bind mounts, and the CNI
//! plugins that attach them.

pub mod cni;
pub mod netns;
