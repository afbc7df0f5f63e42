#!/usr/bin/env bash
# Installs everything husk's build, tests, demo and benchmarks use on a
# fresh Debian machine (run as root). Idempotent and quick when all is there.
set -euo pipefail

packages=(
  docker-registry              # the real OCI registry the tests push to
  containernetworking-plugins  # bridge, host-local, portmap, loopback (/usr/lib/cni)
  busybox-static               # test image content
  skopeo umoci                 # image tools (archives, demo image)
  containerd runc              # the peer, for side-by-side benchmarks; runc, an OCI handler
  crun                         # an OCI handler of the cgroup v2 node VM (tests/node_vm/handlers.rs)
  libseccomp-dev               # seccomp for containers (libseccomp.a: a static build)
  libc6-dev                    # libc.a: husk is one static executable
  libelf-dev zlib1g-dev        # libbpf (cgroup v2 device programs)
  apache2-utils                # htpasswd for auth tests
  iproute2 iptables jq procps curl ca-certificates util-linux mount
  pkg-config python3           # libseccomp linking; helper scripts
  binutils                     # strip/objdump for make package
  python3-grpcio               # a gRPC C-core client for the socket tests
  qemu-system-x86              # the node VMs (tests/node_vm): software emulation
  linux-image-amd64            # Debian's stock kernel, booted in the node VMs
  apparmor                     # apparmor_parser, for AppArmor in the node VMs
  systemd dbus                 # PID 1 and the system bus of the systemd node VM
  e2fsprogs kmod               # mkfs.ext4, modprobe: the ext4 root of the 6.1 node's user namespace test
  wabt                         # wat2wasm: the WASI program of tests/shim_v2_wasm.rs
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # containerd and docker-registry would start their Debian services on
  # install. Nothing here needs them (the tests and benchmarks start their
  # own, on their own sockets and ports), and stopping a daemon afterwards
  # could take down a node's runtime: keep the install from starting any
  # service instead (policy-rc.d, as Debian's chroot builders do), and never
  # stop what this script did not start.
  policy=/usr/sbin/policy-rc.d
  own_policy=
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    own_policy=1
  fi
  trap '[ -n "$own_policy" ] && rm -f "$policy"' EXIT
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
command -v cargo >/dev/null || {
  echo "setup: cargo (a Rust toolchain) is required: install rustup's stable toolchain first" >&2
  exit 1
}
# virtme-ng boots the node VMs with this machine's file system shared in.
if ! command -v vng >/dev/null; then
  python3 -m pip install -q virtme-ng
  # pyenv's Pythons reach PATH through shims made by a rehash.
  if command -v pyenv >/dev/null; then pyenv rehash; fi
  command -v vng >/dev/null || { echo "setup: virtme-ng installed but vng is not on PATH" >&2; exit 1; }
fi
# cargo fuzz (libFuzzer) for the fuzz targets in tests/fuzz.
cargo fuzz --version >/dev/null 2>&1 || cargo install cargo-fuzz --locked
exit 0
