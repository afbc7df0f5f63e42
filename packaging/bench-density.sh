#!/usr/bin/env bash
# Density: husk filled to PODS running pods (a pause and one `sleep`
# container each), measured at checkpoints, killed with -9 and restarted at
# PODS (the recovery is timed), then drained; then the same fill of each
# peer, one after another in the same run (`husk bench --density`).
# The peers: the CRI endpoints in DENSITY_VS (comma-separated, already
# running with their CNI network on a subnet of 1,024+ addresses, e.g.
# containerd 2.3.4 and CRI-O), else Debian's containerd 1.6 started here;
# DENSITY_VS=none: husk alone.
# PODS (default 1000), CHECKPOINTS (default 50,100,250,500), BENCH_JSON=1,
# MOUNT_NAMESPACE (node or pod: husk's mount_namespace, default pod).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
husk=${HUSK:-$here/../target/x86_64-unknown-linux-gnu/release/husk}
pods=${PODS:-1000}
checkpoints=${CHECKPOINTS:-50,100,250,500}
work=$(mktemp -d /tmp/husk-density.XXXXXX)
chmod 755 "$work"
# REGISTRY_PORT: a fixed port for the test registry, so that peers started
# beforehand can name its pause image and trust it (plain HTTP).
port=${REGISTRY_PORT:-$(free_port)}
metrics=127.0.0.1:$(free_port)
bridge="hkd$(printf '%06x' $((RANDOM * RANDOM % 16777216)))"
# A /20: 4,094 addresses, past what one bridge's 1,024 ports can hold.
subnet="10.$((200 + RANDOM % 50)).$((RANDOM % 16 * 16)).0/20"
cleanup() {
  for p in "$work/husk.pid" "$work/containerd/pid" "$work/registry/pid"; do
    [ -f "$p" ] && kill "$(cat "$p")" 2>/dev/null || true
  done
  sleep 1
  pkill -f "containerd-shim-runc-v2 .*$work" 2>/dev/null || true
  rm -rf /tmp/husk-bench-logs
  grep -F "$work" /proc/self/mountinfo | awk '{print $5}' | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  ip link del "$bridge" 2>/dev/null || true
  for d in /sys/fs/cgroup/*/husk-bench; do rmdir "$d"/* "$d" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

bench_images "$work" "$port"
write_conflist "$work/net.d" "$bridge" "$subnet" "$work/ipam"

# husk serve, and the same command again after a kill -9 (--restart-cmd).
cat >"$work/serve.sh" <<SH
#!/bin/sh
exec "$husk" serve --root "$work/husk/root" --state "$work/husk/run" --listen "$work/husk/husk.sock" \\
  --registry-config-dir "$work/certs.d" --cni-conf-dir "$work/net.d" --cni-bin-dir /usr/lib/cni \\
  --sandbox-image "$pause" --metrics-address "$metrics" --log-level ${HUSK_LOG:-warn} \\
  --mount-namespace ${MOUNT_NAMESPACE:-pod} 2>>"$work/husk.log"
SH
cat >"$work/restart.sh" <<SH
#!/bin/sh
kill -9 \$(cat "$work/husk.pid")
while kill -0 \$(cat "$work/husk.pid") 2>/dev/null; do sleep 0.05; done
setsid sh "$work/serve.sh" </dev/null >/dev/null 2>&1 &
echo \$! >"$work/husk.pid"
SH
sh "$work/serve.sh" &
echo $! >"$work/husk.pid"
disown
wait_socket "$work/husk/husk.sock"

vs=()
if [ "${DENSITY_VS:-}" = none ]; then
  :
elif [ -n "${DENSITY_VS:-}" ]; then
  IFS=, read -ra eps <<<"$DENSITY_VS"
  for e in "${eps[@]}"; do vs+=(--vs "$e"); done
else
  start_containerd "$work/containerd" "$work/certs.d" "$pause" "$work/net.d"
  vs=(--vs "unix://$work/containerd/containerd.sock")
fi

"$husk" bench --density "$pods" --checkpoints "$checkpoints" --image "$app" \
  --endpoint "unix://$work/husk/husk.sock" "${vs[@]}" \
  --restart-cmd "sh $work/restart.sh" --metrics-address "$metrics" ${BENCH_JSON:+--json}
