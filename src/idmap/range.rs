//! One range of ids a pod's user namespace maps: what the pod asked for,
//! what the namespace is made with, and what idmapped mounts see through.

/// One id range: `length` ids from `container_id` inside, `host_id` outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IdRange {
    pub container_id: u32,
    pub host_id: u32,
    pub length: u32,
}
