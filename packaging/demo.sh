#!/usr/bin/env bash
# The main job on embedded defaults: a local registry serving a busybox
# image built here, husk serve on a private root and socket, a pull with
# progress, and a listing. Cleans up after itself.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
husk=${HUSK:-$here/../target/release/husk}
work=$(mktemp -d /tmp/husk-demo.XXXXXX)
port=$(free_port)
cleanup() {
  [ -f "$work/husk.pid" ] && kill "$(cat "$work/husk.pid")" 2>/dev/null && sleep 0.5
  [ -f "$work/registry/pid" ] && kill "$(cat "$work/registry/pid")" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

echo "== registry on 127.0.0.1:$port"
start_registry "$work/registry" "$port"
echo "== building a busybox image"
build_busybox_oci "$work/layout"
skopeo copy --quiet --dest-tls-verify=false "oci:$work/layout:latest" "docker://127.0.0.1:$port/demo/busybox:latest"

echo "== husk serve"
"$husk" serve --root "$work/root" --state "$work/run" --listen "$work/run/husk.sock" \
  --registry-config-dir "$work/certs.d" --cni-conf-dir "$work/net.d" 2>"$work/husk.log" &
echo $! >"$work/husk.pid"
wait_socket "$work/run/husk.sock"
ep="unix://$work/run/husk.sock"

echo "== pull"
"$husk" images --endpoint "$ep" pull "127.0.0.1:$port/demo/busybox:latest"
echo "== list"
"$husk" images --endpoint "$ep" ls
echo "== the image runs: busybox from its snapshot"
snap=$(ls -d "$work"/root/snapshots/[0-9]*/fs | head -n1)
"$snap/bin/busybox" echo "hello from the pulled image"
echo "== done"
