//! Sources and pod config: the pods this node should run, as the
//! kubelet's PodConfig merges them from its sources (a manifest directory,
//! a URL, the API server's watch) into ADD / UPDATE / DELETE (`sources`),
//! the pod manager that holds the desired set (`pod_manager`), admission
//! (`admission`) and graceful deletions in progress (`deletions`).

pub mod admission;
pub mod deletions;
pub mod pod_manager;
pub mod sources;
