//! Compiles the CRI v1 API (vendored from k8s.io/cri-api), husk's own
//! gRPC APIs (proto/husk) and the messages of NRI's API (vendored from
//! github.com/containerd/nri v0.12.0, pkg/api; spoken over ttrpc by
//! `src/nri`, so no gRPC stubs), the subset of containerd's shim v2 API
//! that husk's shim speaks to shim runtimes (`src/shim/v2`, over ttrpc
//! too), and the subset of containerd's services husk serves to shim
//! runtimes (`src/server/containerd_api`) with a vendored protoc, so the build does
//! not depend on the host's protobuf compiler version.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    std::env::set_var("PROTOC", protoc);
    println!("cargo:rerun-if-changed=proto");
    // A position-dependent executable: no load-time relocation of its
    // read-only data, which would otherwise be copied into private memory
    // in every process (every per-pod shim).
    println!("cargo:rustc-link-arg-bins=-no-pie");
    tonic_prost_build::configure().compile_protos(
        &[
            "proto/k8s/cri/v1/api.proto",
            "proto/husk/v1/admin.proto",
            "proto/husk/v1/shim.proto",
            "proto/containerd/services/containers.proto",
            "proto/containerd/services/images.proto",
            "proto/containerd/services/content.proto",
            "proto/containerd/services/leases.proto",
        ],
        &["proto"],
    )?;
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(false)
        .compile_protos(
            &[
                "proto/nri/v1alpha1/api.proto",
                "proto/containerd/v2/shim.proto",
            ],
            &["proto"],
        )?;
    Ok(())
}
