#!/usr/bin/env bash
# Pods and containers, husk against Debian's containerd 1.6 (same conflist,
# same pause and app images, its own root and socket), interleaved in one
# run by the same CRI client (`husk bench`). OPS=sandbox (default):
# RunPodSandbox, stop+remove, memory at 1/10/50 pods. OPS=container:
# create+start, stop+remove, full pod, 50 pods in parallel, memory.
# OPS=exec: the ExecSync round trip of `true` in a running container.
# OPS=breakdown: a pod's lifecycle stage by stage (husk bench --breakdown).
# CGROUP_DRIVER=systemd puts both on the systemd cgroup driver (husk's
# --cgroup-driver, containerd's SystemdCgroup; pods in husk-bench.slice).
# HUSK_VS=<another husk binary> puts that build in containerd's place, so
# two builds are compared side by side in one run (the noise of a shared
# machine falls on both alike).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
husk=${HUSK:-$here/../target/x86_64-unknown-linux-gnu/release/husk}
iterations=${ITERATIONS:-20}
pods=${PODS:-1,10,50}
work=$(mktemp -d /tmp/husk-bench.XXXXXX)
# hostUsers: false pods (OPS=userns) run as unprivileged users of the node,
# which must be able to search down to husk's root.
chmod 755 "$work"
port=$(free_port)
bridge="hkb$(printf '%06x' $((RANDOM * RANDOM % 16777216)))"
subnet="10.$((200 + RANDOM % 50)).$((RANDOM % 250)).0/24"
cleanup() {
  for p in "$work/husk.pid" "$work/vs.pid" "$work/containerd/pid" "$work/registry/pid"; do
    [ -f "$p" ] && kill "$(cat "$p")" 2>/dev/null || true
  done
  sleep 1
  pkill -f "containerd-shim-runc-v2 .*$work" 2>/dev/null || true
  rm -rf /tmp/husk-bench-logs
  grep -F "$work" /proc/self/mountinfo | awk '{print $5}' | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  ip link del "$bridge" 2>/dev/null || true
  for d in /sys/fs/cgroup/*/husk-bench; do rmdir "$d"/* "$d" 2>/dev/null || true; done
  [ -n "${KEEP:-}" ] && cp "$work/husk.log" /tmp/bench-husk.log; rm -rf "$work"
}
trap cleanup EXIT

bench_images "$work" "$port"
write_conflist "$work/net.d" "$bridge" "$subnet" "$work/ipam"

driver=${CGROUP_DRIVER:-cgroupfs}
if [ "$driver" = systemd ]; then
  export SYSTEMD_CGROUP=true HUSK_BENCH_SLICE=1
fi
if [ -n "${HUSK_VS:-}" ]; then
  "$HUSK_VS" serve --cgroup-driver "$driver" --root "$work/vs/root" --state "$work/vs/run" --listen "$work/vs/husk.sock" \
    --registry-config-dir "$work/certs.d" --cni-conf-dir "$work/net.d" --cni-bin-dir /usr/lib/cni \
    --sandbox-image "$pause" --log-level ${HUSK_LOG:-warn} 2>"$work/vs.log" &
  echo $! >"$work/vs.pid"
  wait_socket "$work/vs/husk.sock"
  vs="unix://$work/vs/husk.sock"
else
  start_containerd "$work/containerd" "$work/certs.d" "$pause" "$work/net.d"
  vs="unix://$work/containerd/containerd.sock"
fi
"$husk" serve --cgroup-driver "$driver" --root "$work/husk/root" --state "$work/husk/run" --listen "$work/husk/husk.sock" \
  --registry-config-dir "$work/certs.d" --cni-conf-dir "$work/net.d" --cni-bin-dir /usr/lib/cni \
  --sandbox-image "$pause" --log-level ${HUSK_LOG:-warn} 2>"$work/husk.log" &
echo $! >"$work/husk.pid"
wait_socket "$work/husk/husk.sock"
sleep 1

"$husk" bench --ops "${OPS:-sandbox}" --image "$app" --endpoint "unix://$work/husk/husk.sock" \
  --vs "$vs" --iterations "$iterations" --pods "$pods" ${BENCH_JSON:+--json}
