#!/usr/bin/env bash
# Cold pull of a 100 MB, 5-layer image from a local registry: husk against
# Debian's containerd 1.6 (own root and socket), interleaved in one run by
# the same CRI client (`husk bench`). Prints p50/p90/p99, MB/s, the ratio,
# idle RSS, and the machine's load.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
husk=${HUSK:-$here/../target/x86_64-unknown-linux-gnu/release/husk}
iterations=${ITERATIONS:-5}
work=$(mktemp -d /tmp/husk-bench.XXXXXX)
port=$(free_port)
cleanup() {
  for p in "$work/husk.pid" "$work/containerd/pid" "$work/registry/pid"; do
    [ -f "$p" ] && kill "$(cat "$p")" 2>/dev/null || true
  done
  sleep 1
  grep -F "$work" /proc/self/mountinfo | awk '{print $5}' | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  [ -n "${KEEP:-}" ] && cp "$work/husk.log" /tmp/bench-husk.log; rm -rf "$work"
}
trap cleanup EXIT

start_registry "$work/registry" "$port"
echo "== building the 100 MB, 5-layer image"
build_big_oci "$work/layout"
ref="127.0.0.1:$port/bench/big:latest"
skopeo copy --quiet --dest-tls-verify=false "oci:$work/layout:latest" "docker://$ref"

mkdir -p "$work/certs.d/127.0.0.1:$port"
printf 'server = "http://127.0.0.1:%s"\n\n[host."http://127.0.0.1:%s"]\n  capabilities = ["pull", "resolve"]\n' "$port" "$port" \
  >"$work/certs.d/127.0.0.1:$port/hosts.toml"

start_containerd "$work/containerd" "$work/certs.d"
"$husk" serve --root "$work/husk/root" --state "$work/husk/run" --listen "$work/husk/husk.sock" \
  --registry-config-dir "$work/certs.d" --cni-conf-dir "$work/husk/net.d" --log-level ${HUSK_LOG:-warn} ${HUSK_ARGS:-} 2>"$work/husk.log" &
echo $! >"$work/husk.pid"
wait_socket "$work/husk/husk.sock"
sleep 1

"$husk" bench --endpoint "unix://$work/husk/husk.sock" --vs "unix://$work/containerd/containerd.sock" \
  --image "$ref" --iterations "$iterations" ${BENCH_JSON:+--json}
