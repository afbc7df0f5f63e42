# husk: common tasks. Every target installs what it needs first.
.PHONY: setup build package test test-vm fuzz demo bench-pull bench-sandbox bench-containers bench-breakdown bench-exec bench-stream bench-rpc bench-userns bench-density bench-kubelet-density lint

setup:
	bash packaging/setup-dev.sh

build: setup
	cargo build --release

# The Debian package (target/debian/husk_<version>-1_<arch>.deb).
package: build
	bash packaging/build-deb.sh

# Every test: unit tests, the root integration suite (real registry,
# real kernel mounts), the node VMs, and a bounded run of every fuzz
# target (packaging/test.sh: the fuzz build beside the host suite, the
# fuzz run beside the VMs). As root.
test: setup
	bash packaging/test.sh

# The node VMs alone (also part of `make test`): Debian's stock kernel
# under qemu as a cgroup v2 node, and as one with systemd as PID 1,
# running the guest suite of tests/node_vm.
test-vm: setup
	cargo test --test node_vm -- --nocapture

# Every fuzz target (tests/fuzz) for FUZZ_SECONDS each (default 20), from
# its seed corpus; `make test` runs it too.
fuzz: setup
	bash packaging/fuzz.sh

lint:
	cargo fmt --check
	cargo clippy --all-targets -- -D warnings

# The main job on embedded defaults: a local registry with a test image,
# husk serve, a pull and a listing.
demo: build
	bash packaging/demo.sh

# Cold pull of a 100 MB, 5-layer image: husk vs containerd 1.6, interleaved.
bench-pull: build
	bash packaging/bench-pull.sh

# Pod sandboxes: RunPodSandbox, stop+remove, memory per pod; vs containerd.
bench-sandbox: build
	bash packaging/bench-sandbox.sh

# Containers: create+start, stop+remove, full pod, 50 parallel pods, memory.
bench-containers: build
	OPS=container bash packaging/bench-sandbox.sh

# A pod's lifecycle stage by stage: p50/p90 per stage, husk's own share
# (the RPCs minus the CNI plugins' and the payload's time) beside containerd.
bench-breakdown: build
	OPS=breakdown ITERATIONS=$${ITERATIONS:-30} bash packaging/bench-sandbox.sh

# ExecSync round trip of `true` in a running busybox container.
bench-exec: build
	OPS=exec ITERATIONS=$${ITERATIONS:-200} bash packaging/bench-sandbox.sh
# Streaming: ExecSync and streaming exec of `true`, port-forward MB/s.
bench-stream: build
	OPS=stream ITERATIONS=$${ITERATIONS:-30} bash packaging/bench-sandbox.sh
# What a hostUsers: false pod costs against a plain one (husk only).
bench-userns: build
	OPS=userns ITERATIONS=$${ITERATIONS:-20} bash packaging/bench-sandbox.sh
# The transport: Version and ListPodSandbox round trips (what every RPC pays
# for the socket, HTTP/2 front and gRPC layers).
bench-rpc: build
	OPS=rpc ITERATIONS=$${ITERATIONS:-2000} bash packaging/bench-sandbox.sh
# Density: husk filled to PODS (1000) running pods, measured at 50, 100,
# 250 and 500, killed with -9 and recovered, drained; then each peer of
# DENSITY_VS (CRI endpoints) or Debian's containerd 1.6, the same way.
bench-density: build
	bash packaging/bench-density.sh
# The kubelet at density: husk serve filled to PODS (1000) pods by a
# kubelet with --max-pods PODS from one manifest of PODS+1 replicas: husk
# kubelet, or the upstream kubelet binary named in KUBELET.
bench-kubelet-density: build
	bash packaging/bench-kubelet-density.sh
