#!/usr/bin/env bash
# Every test (`make test`): the unit tests and the root integration suite,
# the node VMs (tests/node_vm), then a bounded run of every fuzz target.
# As root.
#
# The host suite mostly waits (on registries, kernels, timers and pods)
# and leaves about two thirds of the two cores idle, so the fuzz targets'
# build (its own target dir, its own flags: nothing shared with the test
# build) runs beside it at the lowest CPU priority, taking only what the
# suite leaves. The node VMs emulate their CPUs and use both cores: only
# the short fuzz run goes beside them (the host suite beside them would
# slow their guests by a third, past their tests' waits).
set -euo pipefail
cd "$(dirname "$0")/.."

export FUZZ_DEV=${FUZZ_DEV:-1} FUZZ_SECONDS=${FUZZ_SECONDS:-10}
cargo test --all-targets --no-run

fuzz_log=$(mktemp)
vm_log=$(mktemp)
trap 'rm -f "$fuzz_log" "$vm_log"' EXIT
FUZZ_BUILD_ONLY=1 nice -n 19 bash packaging/fuzz.sh >"$fuzz_log" 2>&1 &
fuzz_build=$!

host=0
cargo test --all-targets -- --skip cgroup_v2_node --skip systemd_node || host=$?

built=0
wait "$fuzz_build" || built=$?
if [ "$built" -ne 0 ]; then
  cat "$fuzz_log" >&2
  echo "test: the fuzz targets' build failed (exit $built)" >&2
fi
[ "$host" -eq 0 ] || { echo "test: host suite exit $host" >&2; exit 1; }
[ "$built" -eq 0 ] || exit 1

# The node VMs: the only tests of tests/node_vm that run on the host,
# skipped above by name. The fuzz targets run beside them (one core, for
# FUZZ_SECONDS each): a guest loses about a minute to them.
cargo test --test node_vm -- cgroup_v2_node systemd_node >"$vm_log" 2>&1 &
vms=$!
fuzz=0
bash packaging/fuzz.sh || fuzz=$?
vm=0
wait "$vms" || vm=$?
cat "$vm_log"
if [ "$fuzz" -ne 0 ] || [ "$vm" -ne 0 ]; then
  echo "test: fuzz exit $fuzz, node VMs exit $vm" >&2
  exit 1
fi
