#!/usr/bin/env bash
# Throughput of `shardgate decode` through a pipe (issue 2 goal: at least
# 1,000,000 ids per second for `decode --json`).
#
#   benches/decode_throughput.sh            # 1,000,000 iUIDs
#   N=200000 benches/decode_throughput.sh   # fewer
#
# Builds the release binary, mints N iUIDs into a temporary file, then
# times `decode` reading them on standard input with output to /dev/null:
# --format iuid --json, --json alone (every format tried, as without
# --format), and the human table. Local files and pipes only; bounded by N.
# Prints seconds and ids/s per mode (best of RUNS runs, default 3).
set -euo pipefail
cd "$(dirname "$0")/.."

n="${N:-1000000}"
runs="${RUNS:-3}"
cargo build --release --quiet
bin=./target/release/shardgate
ids="$(mktemp)"
trap 'rm -f "$ids"' EXIT
"$bin" mint --format iuid -n "$n" --country 7 --entity 3 >"$ids"

measure() {
  local label="$1"
  shift
  local best=""
  for _ in $(seq "$runs"); do
    local start end
    start=$(date +%s%N)
    "$bin" decode "$@" <"$ids" >/dev/null
    end=$(date +%s%N)
    local ns=$((end - start))
    if [ -z "$best" ] || [ "$ns" -lt "$best" ]; then best=$ns; fi
  done
  awk -v label="$label" -v ns="$best" -v n="$n" \
    'BEGIN { printf "%-32s %9d ids %8.3f s %12.0f ids/s\n", label, n, ns / 1e9, n / (ns / 1e9) }'
}

measure "decode --format iuid --json" --format iuid --json
measure "decode --json (all formats)" --json
measure "decode --format iuid (table)" --format iuid
