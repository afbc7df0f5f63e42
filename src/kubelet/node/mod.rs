//! The node's face: what the cluster sees of this kubelet and how it
//! reaches it. `apiserver` joins a cluster (the Node and its Lease, the
//! pod watch, status patches, mirror pods, events); `api` is the kubelet
//! API on :10250 (logs, exec, attach, port-forward) that the API server
//! calls. Above the lifecycle room: it reads pods through the workers'
//! shared context and never the other way round.

pub mod api;
pub mod apiserver;
