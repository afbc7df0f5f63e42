//! husk: a CRI v1 container runtime for Kubernetes nodes.
//!
//! `husk serve` answers the kubelet's RuntimeService and ImageService on a
//! unix socket; the image store (`image`) pulls OCI and Docker images into a
//! content store and overlay snapshots. See the README for the whole flow.

pub mod api;
pub mod bench;
pub mod cdi;
pub mod cgroup;
pub mod cli;
pub mod config;
pub mod container;
pub mod dbus;
pub mod idmap;
pub mod image;
pub mod kubelet;
pub mod logging;
pub mod logs;
pub mod metrics;
pub mod network;
pub mod nri;
pub mod oci;
pub mod otel;
pub mod reference;
pub mod sandbox;
pub mod sdnotify;
pub mod security;
pub mod server;
pub mod shim;
pub mod store;
pub mod streaming;
pub mod sys;
pub mod timing;
pub mod ttrpc;
