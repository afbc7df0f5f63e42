//! Pod networking: network namespaces pinned by bind mounts, the CNI
//! plugins that attach them, the node's pod CIDR, and traffic counters.

pub mod bounded;
pub mod cni;
pub mod netdev;
pub mod netns;
pub mod pod_cidr;
