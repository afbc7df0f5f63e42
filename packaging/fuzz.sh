#!/usr/bin/env bash
# Runs every fuzz target in tests/fuzz for a bounded time (FUZZ_SECONDS
# each, default 20) from its seed corpus, with cargo fuzz (libFuzzer) on the
# stable toolchain (no sanitizer: the targets assert what they check).
# New inputs found go to a scratch corpus; the seeds in the repository are
# left as they are. A crash fails the run and leaves its input in
# tests/fuzz/artifacts/<target>/, to become a regression seed.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${FUZZ_SECONDS:-20}
dir=tests/fuzz
flags=(--fuzz-dir "$dir" --sanitizer none)
# FUZZ_DEV=1 (what `make test` uses): an unoptimised build with the same
# debug assertions, without the optimised single-unit codegen of the
# default; each target then runs fewer inputs in its bounded time. Long
# fuzzing wants the default.
if [ "${FUZZ_DEV:-0}" = 1 ]; then
  flags+=(--dev)
fi
# The fuzz targets are ordinary (dynamic, PIE) builds: cargo fuzz sets its
# own RUSTFLAGS, so the static flags of .cargo/config.toml do not apply,
# and libseccomp is linked as the shared library.
export LIBSECCOMP_LINK_TYPE=dylib
cargo fuzz build "${flags[@]}"
# FUZZ_BUILD_ONLY=1: the build alone (packaging/test.sh builds beside the
# host suite, then runs the targets).
if [ "${FUZZ_BUILD_ONLY:-0}" = 1 ]; then
  exit 0
fi
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# FUZZ_TARGETS="a b" runs only those.
for t in ${FUZZ_TARGETS:-$(cargo fuzz list --fuzz-dir "$dir")}; do
  mkdir -p "$scratch/$t"
  echo "fuzz: $t for ${secs}s"
  rc=0
  cargo fuzz run "${flags[@]}" "$t" "$scratch/$t" "$dir/corpus/$t" -- \
    -max_total_time="$secs" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
    >"$scratch/$t.log" 2>&1 || rc=$?
  grep -E "^stat::(number_of_executed_units|peak_rss_mb)|DONE" "$scratch/$t.log" || true
  if [ "$rc" -ne 0 ]; then
    tail -n 60 "$scratch/$t.log" >&2
    echo "fuzz: $t failed (exit $rc)" >&2
    exit 1
  fi
done
