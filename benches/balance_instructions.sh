#!/bin/sh
# Instructions per balancing decision, this crate's least_request against
# tower's p2c over PendingRequests (benches/balance.rs): each counted by
# callgrind at two request counts, the difference divided by theirs, so
# that setup and exit are not counted.
#
#   benches/balance_instructions.sh [REQUESTS]
set -eu
cd "$(dirname "$0")/.."
n=${1:-200000}
cargo bench --bench balance --no-run 2>/dev/null
bin=$(ls -t target/release/deps/balance-* | grep -v '\.d$' | head -n 1)
count() {
    out=$(mktemp)
    valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" "$1" "$2" >/dev/null 2>&1
    sed -n 's/^summary: //p; s/^totals: //p' "$out" | head -n 1
    rm -f "$out"
}
for which in ours tower; do
    small=$(count "$which" 1000)
    large=$(count "$which" "$((n + 1000))")
    echo "$which: $(( (large - small) / n )) instructions a request ($n requests)"
done
