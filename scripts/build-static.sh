#!/usr/bin/env bash
# Builds a statically linked release binary of shardgate and stages what the
# container image needs (see Dockerfile):
#
#   target/x86_64-unknown-linux-gnu/release/shardgate   the static binary (under
#                                                       $CARGO_TARGET_DIR if set)
#   target/image/shardgate                              the same, stripped of debug info
#   target/image/ca-certificates.crt                    the build host's CA bundle
#
# glibc is linked statically (-C target-feature=+crt-static). The flag is
# passed with an explicit --target, so it applies to shardgate only and not
# to build scripts and proc-macros, which run on the host.
#
# Host names (upstreams, peers) are still resolved by glibc's getaddrinfo;
# the image ships an /etc/nsswitch.conf with "hosts: files dns", and glibc
# 2.34+ has its files and dns NSS back ends built into libc, so no shared
# NSS module is needed at run time (tests/compose/run.sh checks this with
# compose service names).
#
# Usage: scripts/build-static.sh
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET=x86_64-unknown-linux-gnu
BIN="${CARGO_TARGET_DIR:-target}/$TARGET/release/shardgate"
STAGE=target/image
CA_BUNDLE=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}

if [[ "$(uname -m)" != x86_64 ]]; then
  echo "build-static: this script builds for $TARGET on an x86_64 host (this is $(uname -m))" >&2
  exit 1
fi
if [[ ! -r "$CA_BUNDLE" ]]; then
  echo "build-static: no CA bundle at $CA_BUNDLE (install Debian's ca-certificates or set CA_BUNDLE)" >&2
  exit 1
fi

echo "build-static: cargo build --release --locked --target $TARGET (crt-static, profile-guided)"
start=$(date +%s)
# Optimised with the committed profile of the load benchmark's workload
# (scripts/pgo-refresh.sh makes it; see pgo/README.md).
PGO="-C profile-use=$PWD/pgo/shardgate.profdata"
RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static $PGO" \
  cargo build --release --locked --target "$TARGET" --bin shardgate
echo "build-static: built in $(($(date +%s) - start))s"

# A static binary has no NEEDED entries and no program interpreter.
if readelf -d "$BIN" 2>/dev/null | grep -q '(NEEDED)' || readelf -l "$BIN" | grep -q 'program interpreter'; then
  echo "build-static: $BIN is not statically linked:" >&2
  readelf -d "$BIN" | grep '(NEEDED)' >&2 || true
  exit 1
fi

mkdir -p "$STAGE"
strip --strip-debug -o "$STAGE/shardgate.tmp" "$BIN"
mv -f "$STAGE/shardgate.tmp" "$STAGE/shardgate"
cp -f "$CA_BUNDLE" "$STAGE/ca-certificates.crt"
chmod 0755 "$STAGE/shardgate"
chmod 0644 "$STAGE/ca-certificates.crt"
"$STAGE/shardgate" --version
echo "build-static: $BIN (static, $(du -h "$BIN" | cut -f1))"
echo "build-static: staged $STAGE/shardgate ($(du -h "$STAGE/shardgate" | cut -f1)) and $STAGE/ca-certificates.crt"
