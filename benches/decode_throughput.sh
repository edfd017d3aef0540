#!/usr/bin/env bash
# Throughput of `shardgate decode` through a pipe: ids come in on a pipe
# (`cat FILE |`) and the output leaves on one (`| cat >/dev/null`), as in
# a support engineer's shell.
#
#   benches/decode_throughput.sh                        # 1,000,000 iUIDs
#   N=200000 RUNS=5 benches/decode_throughput.sh        # fewer ids, more runs
#   BASELINE=/path/to/old/shardgate benches/decode_throughput.sh
#   PIPE=0 benches/decode_throughput.sh                 # file in, /dev/null out
#
# Builds the release binary, mints N iUIDs into a temporary file, then
# times three modes: --format iuid --json, --json alone (every format
# tried, as without --format), and the human table. Each mode runs RUNS
# times (default 5); with BASELINE, the baseline binary runs right after
# the new one in every round, so both see the same moments of a shared,
# noisy host. Prints the median and best per binary and mode, in ids/s,
# and the median ratio new/baseline. PIPE=0 reads the file directly and
# writes to /dev/null (how this script measured before 2026-11-24: it
# leaves out the cost of the pipes themselves, ~440 MB of output through
# one). Local files and pipes only.
set -euo pipefail
cd "$(dirname "$0")/.."

n="${N:-1000000}"
runs="${RUNS:-5}"
baseline="${BASELINE:-}"
pipe="${PIPE:-1}"
cargo build --release --quiet
bin=./target/release/shardgate
ids="$(mktemp)"
times="$(mktemp)"
trap 'rm -f "$ids" "$times"' EXIT
"$bin" mint --format iuid -n "$n" --country 7 --entity 3 >"$ids"

# Nanoseconds for one pipe run of `$1 decode ARGS...`.
one_run() {
  local b="$1"
  shift
  local start end
  start=$(date +%s%N)
  if [ "$pipe" = 0 ]; then
    "$b" decode "$@" <"$ids" >/dev/null
  else
    cat "$ids" | "$b" decode "$@" | cat >/dev/null
  fi
  end=$(date +%s%N)
  echo $((end - start))
}

measure() {
  local label="$1"
  shift
  : >"$times"
  for _ in $(seq "$runs"); do
    echo "new $(one_run "$bin" "$@")" >>"$times"
    if [ -n "$baseline" ]; then
      echo "baseline $(one_run "$baseline" "$@")" >>"$times"
    fi
  done
  awk -v label="$label" -v n="$n" '
    { t[$1] = t[$1] " " $2 }
    function median(list,   a, k, i, j, x) {
      k = split(list, a, " ")
      for (i = 2; i <= k; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
      return (k % 2) ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
    }
    function best(list,   a, k, i, m) {
      k = split(list, a, " "); m = a[1]
      for (i = 2; i <= k; i++) if (a[i] < m) m = a[i]
      return m
    }
    END {
      for (who in t) {
        m[who] = median(t[who])
        printf "%-30s %-8s %9d ids  median %7.3f s %10.0f ids/s  best %10.0f ids/s\n",
          label, who, n, m[who] / 1e9, n / (m[who] / 1e9), n / (best(t[who]) / 1e9)
      }
      if ("baseline" in m) printf "%-30s new/baseline time (medians): %.3f\n", label, m["new"] / m["baseline"]
    }' "$times"
}

measure "decode --format iuid --json" --format iuid --json
measure "decode --json (every format)" --json
measure "decode --format iuid (table)" --format iuid
