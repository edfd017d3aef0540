#!/usr/bin/env bash
# Regenerates pgo/shardgate.profdata, the profile the release builds that ship
# or are measured (scripts/build-static.sh for the image, benches/load/run)
# optimise with (rustc -C profile-use).
#
#   1. builds shardgate with -C profile-generate (in target/pgo-train);
#   2. runs the load benchmarks' routed workloads through it
#      (benches/load/train.py: cleartext HTTP/1.1 with ids in the path, then
#      in a header; HTTPS/1.1 and HTTP/2 over TLS), and stops it so that it
#      writes its raw profile;
#   3. merges that with llvm-profdata (--sparse: only functions that ran)
#      into pgo/shardgate.profdata.
#
# Run it after changing code the request path runs, and commit the new
# profile with the change: a function whose control flow no longer matches
# its profile is compiled without one (rustc passes LLVM's warning on), so a
# stale profile costs speed, never correctness.
#
# llvm-profdata must read the raw format of rustc's own LLVM: the script uses
# rustup's llvm-tools component (`rustup component add llvm-tools`) when it is
# installed, else looks for llvm-profdata-N (N = the major version `rustc -vV`
# reports) or an llvm-profdata of that version, and installs Debian's llvm-N
# when neither is there. nginx, wrk and h2load come from Debian too (as for
# benches/load/run).
#
# Usage: scripts/pgo-refresh.sh [--seconds 5]
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET=x86_64-unknown-linux-gnu
OUT=pgo/shardgate.profdata
major=$(rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')
[ -n "$major" ] || { echo "pgo-refresh: rustc -vV names no LLVM version" >&2; exit 1; }

profdata=""
# rustup's llvm-tools component ships the llvm-profdata of rustc's own LLVM.
rustup_profdata="$(rustc --print sysroot)/lib/rustlib/$(rustc -vV | sed -n 's/^host: //p')/bin/llvm-profdata"
if [ -x "$rustup_profdata" ]; then
  profdata="$rustup_profdata"
elif command -v "llvm-profdata-$major" >/dev/null; then
  profdata="llvm-profdata-$major"
elif command -v llvm-profdata >/dev/null && llvm-profdata --version | grep -q "LLVM version $major\."; then
  profdata=llvm-profdata
else
  echo "pgo-refresh: installing llvm-$major (llvm-profdata for rustc's LLVM $major)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "llvm-$major" >/dev/null
  profdata="llvm-profdata-$major"
fi
need=()
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || need+=(nginx-light)
command -v wrk >/dev/null || need+=(wrk)
command -v h2load >/dev/null || need+=(nghttp2-client)
if [ ${#need[@]} -gt 0 ]; then
  echo "pgo-refresh: installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
systemctl stop nginx >/dev/null 2>&1 || true

# The sources this profile is made from (benches/load/run checks it).
sources=$(scripts/pgo-sources.sh)
raw=$(mktemp -d)
trap 'rm -rf "$raw"' EXIT
echo "pgo-refresh: building an instrumented shardgate"
# --target keeps the flag off build scripts and proc-macros, which run on
# the host and are not what is profiled.
RUSTFLAGS="-C profile-generate=$raw" \
  cargo build --release --locked --target "$TARGET" --target-dir target/pgo-train --bin shardgate
python3 benches/load/train.py "$@" "target/pgo-train/$TARGET/release/shardgate"
"$profdata" merge --sparse -o "$OUT" "$raw"/*.profraw
echo "$sources" > pgo/sources.sha256
echo "pgo-refresh: wrote $OUT ($(stat -c %s "$OUT") bytes) and pgo/sources.sha256; commit both"
