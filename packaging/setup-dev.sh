#!/usr/bin/env bash
# Installs everything husk's build, tests, demo and benchmarks use on a
# fresh Debian machine (run as root). Idempotent and quick when all is there.
set -euo pipefail

packages=(
  docker-registry              # the real OCI registry the tests push to
  containernetworking-plugins  # bridge, host-local, portmap, loopback (/usr/lib/cni)
  busybox-static               # test image content
  skopeo umoci                 # image tools (archives, demo image)
  containerd runc              # the peer, for side-by-side benchmarks
  libseccomp-dev               # seccomp for containers
  apache2-utils                # htpasswd for auth tests
  iproute2 iptables jq procps curl ca-certificates util-linux mount
  pkg-config python3           # libseccomp linking; helper scripts
  python3-grpcio               # a gRPC C-core client for the socket tests
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
command -v cargo >/dev/null || { echo "setup: cargo (a Rust toolchain) is required" >&2; exit 1; }
# The Debian packages may start daemons we do not want sharing the machine.
pkill -x containerd 2>/dev/null || true
pkill -f 'docker-registry serve /etc/docker/registry' 2>/dev/null || true
exit 0
