#!/usr/bin/env bash
# Prints one digest of the sources a profile-guided build compiles: every
# file under src/ and crates/, and Cargo.lock (the dependencies' versions).
# scripts/pgo-refresh.sh records it in pgo/sources.sha256 beside the profile
# it makes; benches/load/run compares it with the tree's. A profile made from
# other sources goes stale without a warning for the code added since (rustc
# warns only of functions whose entry no longer matches, not of missing
# ones), so the digest is how a stale profile is noticed.
set -euo pipefail
cd "$(dirname "$0")/.."
find src crates -type f -not -path '*/target/*' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum \
  | cat - <(sha256sum Cargo.lock) | sha256sum | cut -d' ' -f1
