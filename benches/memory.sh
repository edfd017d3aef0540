#!/usr/bin/env bash
# Memory benchmark (not a timed test): does the proxy's resident memory stay
# flat under sustained traffic?
#
# Builds the release binary, starts three demo backends and the proxy on
# loopback, sends a warm-up of WARMUP requests, reads VmRSS from
# /proc/PID/status, sends REQUESTS more, reads VmRSS again and prints both and
# the growth. The traffic mixes every region, a bad id (400) and a path with
# no route (404), so the error paths and their metric series are exercised
# too. Access logging stays on (written to /dev/null).
#
# Usage: benches/memory.sh            (1 000 000 requests after 100 000 of warm-up)
#        REQUESTS=200000 benches/memory.sh
# Needs: wrk (Debian package `wrk`), curl. Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."

REQUESTS=${REQUESTS:-1000000}
WARMUP=${WARMUP:-100000}
CONNECTIONS=${CONNECTIONS:-32}
THREADS=${THREADS:-2}
BASE_PORT=${BASE_PORT:-18180}
LIMIT_S=${LIMIT_S:-600}   # upper bound on each wrk run

command -v wrk >/dev/null || { echo "memory.sh: wrk is required (apt-get install wrk)" >&2; exit 2; }
command -v curl >/dev/null || { echo "memory.sh: curl is required" >&2; exit 2; }

cargo build --release --quiet
BIN=target/release/shardgate
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

EU=$((BASE_PORT + 1)); KZ=$((BASE_PORT + 2)); US=$((BASE_PORT + 3))
LISTEN=$BASE_PORT; ADMIN=$((BASE_PORT + 9))
for pair in "eu $EU" "kz $KZ" "us $US"; do
  set -- $pair
  RUST_LOG=warn "$BIN" backend --region "$1" --listen "127.0.0.1:$2" 2>/dev/null &
  PIDS+=($!)
done

cat >"$WORK/table.yaml" <<EOF
version: 1
listen: 127.0.0.1:$LISTEN
admin: 127.0.0.1:$ADMIN
regions:
  eu: { upstreams: ["http://127.0.0.1:$EU"] }
  kz: { upstreams: ["http://127.0.0.1:$KZ"] }
  us: { upstreams: ["http://127.0.0.1:$US"] }
countries:
  KZ: { id: 7, region: kz }
  DE: { id: 49, region: eu }
  US: { id: 1, region: us }
entities: { IntercityOrder: 3 }
routes:
  - name: orders
    match: { path: "/v1/orders/{id}" }
    id: { path_param: id, formats: [iuid] }
EOF
"$BIN" serve -c "$WORK/table.yaml" 2>/dev/null &
PROXY=$!
PIDS+=($PROXY)

for _ in $(seq 1 100); do
  curl -fsS "http://127.0.0.1:$ADMIN/ready" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fsS "http://127.0.0.1:$ADMIN/ready" >/dev/null

KZ_ID=$("$BIN" mint --format iuid --country 7 --entity 3)
EU_ID=$("$BIN" mint --format iuid --country 49 --entity 3)
US_ID=$("$BIN" mint --format iuid --country 1 --entity 3)

# Each wrk thread stops sending after its share of the requests (wrk's main
# thread still sleeps for -d, so run() stops wrk once the proxy has counted them).
cat >"$WORK/mix.lua" <<EOF
local paths = {
  "/v1/orders/$KZ_ID", "/v1/orders/$EU_ID", "/v1/orders/$US_ID",
  "/v1/orders/$KZ_ID", "/v1/orders/$EU_ID", "/v1/orders/$US_ID",
  "/v1/orders/$KZ_ID", "/v1/orders/not-an-id", "/nothing/here",
}
local count = 0
local i = 0
function setup(thread) thread:set("limit", tonumber(os.getenv("PER_THREAD"))) end
function request()
  i = i % #paths + 1
  return wrk.format("GET", paths[i])
end
function response(status, headers, body)
  count = count + 1
  if count >= limit then wrk.thread:stop() end
end
EOF

rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$PROXY/status"; }
handled() {
  curl -fsS "http://127.0.0.1:$ADMIN/metrics" |
    awk '/^shardgate_http_server_request_duration_seconds_count/ { n += $NF } END { printf "%d\n", n }'
}
run() { # $1 = total requests
  local target=$(( $(handled) + $1 )) started=$SECONDS
  PER_THREAD=$(( $1 / THREADS )) wrk -t"$THREADS" -c"$CONNECTIONS" -d"${LIMIT_S}s" --latency -s "$WORK/mix.lua" \
    "http://127.0.0.1:$LISTEN" >"$WORK/wrk.out" 2>&1 &
  local wrk=$!
  # Admin requests are not counted by the proxy's histogram, so polling does not disturb the count.
  while kill -0 "$wrk" 2>/dev/null && [ "$(handled)" -lt "$target" ]; do sleep 0.5; done
  kill -INT "$wrk" 2>/dev/null || true
  wait "$wrk" || true
  local secs=$(( SECONDS - started ))
  echo "    $1 requests in ${secs}s (~$(( $1 / (secs > 0 ? secs : 1) )) req/s)"
  grep -E "Non-2xx|Socket errors|Latency " "$WORK/wrk.out" | sed 's/^/    /' || true
}

echo "warm-up: $WARMUP requests"
run "$WARMUP"
sleep 1
BEFORE=$(rss_kib)
echo "measured: $REQUESTS requests"
run "$REQUESTS"
sleep 1
AFTER=$(rss_kib)
TOTAL=$(handled)

awk -v b="$BEFORE" -v a="$AFTER" -v n="$TOTAL" 'BEGIN {
  printf "requests handled by the proxy (from /metrics): %d\n", n
  printf "VmRSS after warm-up: %d KiB (%.1f MiB)\n", b, b / 1024
  printf "VmRSS at the end:    %d KiB (%.1f MiB)\n", a, a / 1024
  printf "growth after warm-up: %+.1f%%\n", (a - b) * 100 / b
}'
