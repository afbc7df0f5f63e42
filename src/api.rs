//! Generated gRPC code: CRI v1 (`runtime.v1`, from the vendored
//! k8s.io/cri-api proto) and husk's own admin API (`husk.v1`).

#[allow(clippy::all, clippy::unwrap_used, missing_docs)]
pub mod cri {
    tonic::include_proto!("runtime.v1");
}

#[allow(clippy::all, clippy::unwrap_used, missing_docs)]
pub mod admin {
    tonic::include_proto!("husk.v1");
}

#[allow(clippy::all, clippy::unwrap_used, missing_docs)]
pub mod shim {
    tonic::include_proto!("husk.shim.v1");
}
