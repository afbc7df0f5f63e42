#!/usr/bin/env bash
# The kubelet at density: husk serve filled by a kubelet with --max-pods
# PODS (default 1000) from one set of manifests, PODS+1 pods made from one
# template (as a Deployment's ReplicaSet makes them: a pause and one
# `sleep` container each, on the CNI bridge). KUBELET=husk (default) runs
# `husk kubelet`; KUBELET=/path/to/kubelet runs an upstream kubelet (1.28)
# standalone against the same husk serve (KUBELET_NAME names it in the report).
# Reports: the time until 250, 500, 750 and PODS pods run; that the one pod
# past capacity is refused (OutOfpods) and no other; the PLEG's relists
# at PODS (husk kubelet: its node.json; upstream: its
# kubelet_pleg_relist_duration_seconds and any "PLEG is not healthy"); the
# server's and monitors' memory; then the manifests are removed, the drain
# timed, and what is left counted (sandboxes, shims, mounts, veths).
# MOUNT_NAMESPACE: husk serve's mount_namespace (pod, the default, or node).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
husk=${HUSK:-$here/../target/x86_64-unknown-linux-gnu/release/husk}
pods=${PODS:-1000}
kubelet=${KUBELET:-husk}
settle=${SETTLE:-60}
work=$(mktemp -d /tmp/husk-kdensity.XXXXXX)
chmod 755 "$work"
port=${REGISTRY_PORT:-$(free_port)}
metrics=127.0.0.1:$(free_port)
ro_port=$(free_port)
bridge="hkk$(printf '%06x' $((RANDOM * RANDOM % 16777216)))"
subnet="10.$((200 + RANDOM % 50)).$((RANDOM % 16 * 16)).0/20"
cg="husk-kdensity-$$"
cleanup() {
  # KEEP_LOGS=DIR keeps the kubelet's and the server's logs.
  if [ -n "${KEEP_LOGS:-}" ]; then
    mkdir -p "$KEEP_LOGS" && cp "$work"/kubelet.log "$work"/husk.log "$KEEP_LOGS"/ 2>/dev/null || true
  fi
  for p in "$work/kubelet.pid" "$work/husk.pid" "$work/registry/pid"; do
    [ -f "$p" ] && kill "$(cat "$p")" 2>/dev/null || true
  done
  sleep 1
  # A run cut short leaves pods: their monitors and containers go too.
  pkill -9 -f "shim --dir $work/husk" 2>/dev/null || true
  for d in /sys/fs/cgroup/*/"$cg" /sys/fs/cgroup/"$cg"; do
    [ -d "$d" ] && find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null | xargs -r kill -9 2>/dev/null || true
  done
  sleep 1
  grep -F "$work" /proc/self/mountinfo | awk '{print $5}' | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  ip link del "$bridge" 2>/dev/null || true
  for d in /sys/fs/cgroup/*/"$cg" /sys/fs/cgroup/"$cg"; do
    [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  # The upstream kubelet (1.28) keeps pod logs under /var/log/pods.
  if [ "$kubelet" != husk ]; then
    rm -rf /var/log/pods/density_app-* /var/log/containers/app-*_density_*
  fi
  rm -rf "$work"
}
trap cleanup EXIT
for d in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
  [ -f "$d/cgroup.procs" ] && mkdir -p "$d/$cg"
done

bench_images "$work" "$port"
write_conflist "$work/net.d" "$bridge" "$subnet" "$work/ipam"
"$husk" serve --root "$work/husk/root" --state "$work/husk/run" --listen "$work/husk/husk.sock" \
  --registry-config-dir "$work/certs.d" --cni-conf-dir "$work/net.d" --cni-bin-dir /usr/lib/cni \
  --sandbox-image "$pause" --metrics-address "$metrics" --log-level warn \
  --mount-namespace "${MOUNT_NAMESPACE:-pod}" 2>>"$work/husk.log" &
echo $! >"$work/husk.pid"
wait_socket "$work/husk/husk.sock"
endpoint="unix://$work/husk/husk.sock"
wait_ready "$husk" "$endpoint"
"$husk" images --endpoint "$endpoint" pull "$app" >/dev/null
"$husk" images --endpoint "$endpoint" pull "$pause" >/dev/null

# One template, PODS+1 replicas.
mkdir -p "$work/manifests" "$work/status" "$work/pod-logs"
python3 - "$work/manifests" "$pods" "$app" <<'PY'
import json, sys
path, n, image = sys.argv[1], int(sys.argv[2]), sys.argv[3]
for i in range(n + 1):
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"app-{i:04d}", "namespace": "density",
                     "labels": {"app": "density", "pod-template-hash": "7d4b9c"}},
        "spec": {"terminationGracePeriodSeconds": 2, "restartPolicy": "Always",
                 "containers": [{"name": "sleep", "image": image,
                                 "imagePullPolicy": "IfNotPresent",
                                 "command": ["sleep", "2147483647"]}]},
    }
    json.dump(pod, open(f"{path}/app-{i:04d}.json", "w"))
PY

if [ "$kubelet" = husk ]; then
  name="husk kubelet"
  "$husk" kubelet --runtime-endpoint "$endpoint" --root "$work/kubelet" \
    --pod-log-root "$work/pod-logs" --node-name kdensity --cgroup-root "/$cg" \
    --status-dir "$work/status" --manifests "$work/manifests" --max-pods "$pods" \
    --address 127.0.0.1 --port "$(free_port)" --log-level warn >/dev/null 2>"$work/kubelet.log" &
else
  name=${KUBELET_NAME:-"kubelet $("$kubelet" --version | awk '{print $2}')"}
  cat >"$work/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: $work/manifests
maxPods: $pods
cgroupDriver: cgroupfs
cgroupRoot: /$cg
failSwapOn: false
address: 127.0.0.1
port: $(free_port)
readOnlyPort: $ro_port
healthzPort: 0
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
imageGCHighThresholdPercent: 100
evictionHard: {memory.available: "100Mi"}
resolvConf: /etc/resolv.conf
YAML
  "$kubelet" --config "$work/kubelet.yaml" --container-runtime-endpoint "$endpoint" \
    --root-dir "$work/kubelet" --hostname-override kdensity --v=1 2>"$work/kubelet.log" &
fi
echo $! >"$work/kubelet.pid"
t0=$(date +%s.%N)

# Phases of the kubelet's pods: "<running> <refused>".
count() {
  if [ "$kubelet" = husk ]; then
    python3 - "$work/status" <<'PY'
import json, os, sys
run = bad = 0
for f in os.listdir(sys.argv[1]):
    if not f.startswith("density_"):
        continue
    try:
        s = json.load(open(os.path.join(sys.argv[1], f))).get("status", {})
    except (OSError, ValueError):
        continue
    run += s.get("phase") == "Running" and all(c.get("ready") for c in s.get("containerStatuses") or [{}])
    bad += s.get("reason") == "OutOfpods"
print(run, bad)
PY
  else
    curl -fs "http://127.0.0.1:$ro_port/pods" 2>/dev/null | python3 -c '
import json, sys
try:
    items = json.load(sys.stdin).get("items") or []
except ValueError:
    items = []
run = sum(1 for p in items if p.get("status", {}).get("phase") == "Running"
          and all(c.get("ready") for c in p["status"].get("containerStatuses") or [{}]))
# A static pod is critical to the upstream kubelet: past capacity it
# tries preemption, finds nothing to preempt, and says so.
bad = sum(1 for p in items if p.get("status", {}).get("reason") in ("OutOfpods", "UnexpectedAdmissionError"))
print(run, bad)' || echo "0 0"
  fi
}
since() { python3 -c "import sys,time; print('%.1f' % (time.time() - float(sys.argv[1])))" "$1"; }

echo "# $name, $pods pods (+1 past capacity) on husk serve; load $(cut -d' ' -f1 /proc/loadavg)"
next=$((pods < 250 ? pods : 250))
deadline=$(($(date +%s) + pods + 600))
running=0
while [ "$(date +%s)" -lt "$deadline" ]; do
  read -r running refused < <(count)
  while [ "$next" -le "$pods" ] && [ "$running" -ge "$next" ]; do
    echo "running $next: $(since "$t0") s"
    next=$((next + 250))
    [ "$next" -gt "$pods" ] && [ "$next" -lt $((pods + 250)) ] && next=$pods
  done
  [ "$running" -ge "$pods" ] && break
  sleep 2
done
if [ "$running" -lt "$pods" ]; then
  echo "FAIL: $running of $pods running after $(since "$t0") s" >&2
  tail -20 "$work/kubelet.log" >&2
  exit 1
fi
echo "steady for ${settle} s at $pods pods"
sleep "$settle"
read -r running refused < <(count)
echo "running $running, refused past capacity $refused (want $pods and 1)"
if [ "$kubelet" = husk ]; then
  python3 -c 'import json,sys; n=json.load(open(sys.argv[1])); p=n["pleg"]; h=n["housekeeping"]; print("PLEG %s, healthy %s, last relist %.1f ms, longest %.1f ms, %d of %d relists over their period; housekeeping (every %.0f s) late by %.1f ms at worst" % (p["mode"], p["healthy"], p["lastRelistSeconds"]*1e3, p["longestRelistSeconds"]*1e3, p["relistsOverPeriod"], p["relists"], h["periodSeconds"], h["longestLateSeconds"]*1e3))' "$work/status/node.json"
else
  curl -fs "http://127.0.0.1:$ro_port/metrics" | python3 -c '
import re, sys
b, s, n = {}, 0.0, 0
for l in sys.stdin:
    if l.startswith("kubelet_pleg_relist_duration_seconds_bucket"):
        b[float(re.search(r"le=\"([^\"]+)\"", l).group(1).replace("+Inf", "inf"))] = float(l.split()[-1])
    elif l.startswith("kubelet_pleg_relist_duration_seconds_sum"):
        s = float(l.split()[-1])
    elif l.startswith("kubelet_pleg_relist_duration_seconds_count"):
        n = float(l.split()[-1])
over = n - max((v for k, v in b.items() if k <= 1.0), default=0)
print("PLEG relists %d, mean %.1f ms, over 1 s: %d" % (n, s / max(n, 1) * 1e3, over))'
  # "pleg has yet to be successful" is the start; "was last seen active
  # ... ago" is a relist that took too long.
  echo "PLEG not healthy after its first relist: $(grep -c "pleg was last seen active" "$work/kubelet.log" || true) times; OutOfpods in its log: $(grep -c "OutOfpods" "$work/kubelet.log" || true)"
fi
python3 - "$(cat "$work/husk.pid")" "$work/husk/" <<'PY'
import os, sys
server = int(sys.argv[1])
def kb(pid, key):
    try:
        for l in open(f"/proc/{pid}/smaps_rollup"):
            if l.startswith(key + ":"):
                return int(l.split()[1])
    except OSError:
        pass
    return 0
shims = []
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            a = open(f"/proc/{p}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if len(a) > 3 and a[1:3] == [b"shim", b"--dir"] and a[3].startswith(sys.argv[2].encode()):
            shims.append(int(p))
pss = kb(server, "Pss") + sum(kb(p, "Pss") for p in shims)
print("husk serve RSS %.1f MB; server + %d monitors PSS %.1f MB (%.2f MB a monitor)" % (
    kb(server, "Rss") / 1024, len(shims), pss / 1024, sum(kb(p, "Pss") for p in shims) / 1024 / max(len(shims), 1)))
PY

t1=$(date +%s.%N)
find "$work/manifests" -name "app-*.json" -delete
left=$pods
deadline=$(($(date +%s) + pods + 300))
while [ "$(date +%s)" -lt "$deadline" ]; do
  # A sandbox removed while find walks is no error.
  left=$( (find "$work/husk/root/sandboxes" -mindepth 1 -maxdepth 1 2>/dev/null || true) | wc -l)
  [ "$left" -eq 0 ] && break
  sleep 1
done
echo "drained: $left sandboxes left after $(since "$t1") s"
kill "$(cat "$work/kubelet.pid")"
sleep 2
# The spare made ahead for the next pod (sandbox/spare.rs: a shim and its
# pinned namespaces, no sandbox dir) is the server's, not a pod's.
for d in "$work"/husk/run/ns/*; do
  [ -e "$d" ] && [ ! -d "$work/husk/root/sandboxes/${d##*/}" ] && echo "${d##*/}"
done >"$work/spares"
shims=$(pgrep -af "shim --dir $work/husk" | grep -v -F -f "$work/spares" | wc -l || true)
# So are its root and state, each bound onto itself in pod mode (podns).
mounts=$(awk '{print $5}' /proc/self/mountinfo | grep -F "$work/husk" |
  grep -v -x -F -e "$work/husk/root" -e "$work/husk/run" | grep -v -F -f "$work/spares" | wc -l || true)
veths=$(ip -o link show master "$bridge" 2>/dev/null | wc -l)
echo "left: sandboxes $left, monitors $shims, mounts $mounts, veths $veths (besides $(wc -l <"$work/spares") spare)"
[ "$left" -eq 0 ] && [ "$shims" -eq 0 ] && [ "$mounts" -eq 0 ] && [ "$veths" -eq 0 ]
