#!/usr/bin/env bash
# The main job on embedded defaults: a local registry serving a busybox
# image and a pause image built here, husk serve on a private root, socket
# and CNI network, a pull and a listing, then a pod run end to end with
# `husk run` (init container, emptyDir, fieldRef env, limits, logs
# streamed, the pod removed after it succeeds). Cleans up after itself.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
husk=${HUSK:-$here/../target/x86_64-unknown-linux-gnu/release/husk}
work=$(mktemp -d /tmp/husk-demo.XXXXXX)
port=$(free_port)
bridge="hkd$(printf '%06x' $((RANDOM * RANDOM % 16777216)))"
subnet="10.$((200 + RANDOM % 50)).$((RANDOM % 250)).0/24"
cgroup="husk-demo-$$"
cleanup() {
  [ -f "$work/husk.pid" ] && kill "$(cat "$work/husk.pid")" 2>/dev/null && sleep 0.5
  [ -f "$work/registry/pid" ] && kill "$(cat "$work/registry/pid")" 2>/dev/null
  pkill -f "husk shim --dir $work/" 2>/dev/null || true
  grep -F "$work" /proc/self/mountinfo | awk '{print $5}' | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  ip link del "$bridge" 2>/dev/null || true
  for d in /sys/fs/cgroup/*/"$cgroup"; do
    [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null
  done
  rm -rf "$work"
}
trap cleanup EXIT

echo "== registry on 127.0.0.1:$port"
start_registry "$work/registry" "$port"
echo "== building a busybox image and a pause image"
build_busybox_oci "$work/layout"
skopeo copy --quiet --dest-tls-verify=false "oci:$work/layout:latest" "docker://127.0.0.1:$port/demo/busybox:latest"
build_pause_oci "$work/pause"
skopeo copy --quiet --dest-tls-verify=false "oci:$work/pause:latest" "docker://127.0.0.1:$port/demo/pause:latest"
mkdir -p "$work/certs.d/127.0.0.1:$port"
printf 'server = "http://127.0.0.1:%s"\n' "$port" >"$work/certs.d/127.0.0.1:$port/hosts.toml"
write_conflist "$work/net.d" "$bridge" "$subnet" "$work/ipam"

echo "== husk serve"
"$husk" serve --root "$work/root" --state "$work/run" --listen "$work/run/husk.sock" \
  --registry-config-dir "$work/certs.d" --cni-conf-dir "$work/net.d" --cni-bin-dir /usr/lib/cni \
  --sandbox-image "127.0.0.1:$port/demo/pause:latest" 2>"$work/husk.log" &
echo $! >"$work/husk.pid"
wait_socket "$work/run/husk.sock"
ep="unix://$work/run/husk.sock"
wait_ready "$husk" "$ep"

echo "== pull"
"$husk" images --endpoint "$ep" pull "127.0.0.1:$port/demo/busybox:latest"
echo "== list"
"$husk" images --endpoint "$ep" ls
echo "== husk run packaging/demo-pod.yaml"
sed "s|REGISTRY|127.0.0.1:$port|g" "$here/demo-pod.yaml" >"$work/pod.yaml"
"$husk" run "$work/pod.yaml" --runtime-endpoint "$ep" --root "$work/kubelet" \
  --pod-log-root "$work/logs" --cgroup-root "/$cgroup" --node-name demo
echo "== done"
