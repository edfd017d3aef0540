#!/usr/bin/env bash
# Validates every manifest in deploy/kubernetes/ against the Kubernetes
# schemas, offline, with kubernetes-validate (from PyPI; it ships the
# schemas), and checks the routing table embedded in the ConfigMap with
# `shardgate check`.
#
# kubernetes-validate is installed into a venv under target/ when missing.
# SHARDGATE_BIN: the shardgate binary to check the table with (default:
# target/debug/shardgate, built with cargo if missing).
set -euo pipefail
cd "$(dirname "$0")/../.."

KV_VERSION=1.37.0
# 1.30: the oldest release whose preStop `sleep` action is on by default.
K8S_VERSIONS=(1.30.0 1.37.0)
VENV=target/k8s-venv
MANIFESTS=(deploy/kubernetes/*.yaml)

if [[ ! -x "$VENV/bin/kubernetes-validate" ]] ||
  [[ "$("$VENV/bin/kubernetes-validate" --version 2>/dev/null)" != *"$KV_VERSION"* ]]; then
  echo "k8s: installing kubernetes-validate $KV_VERSION into $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "kubernetes-validate==$KV_VERSION"
fi

for version in "${K8S_VERSIONS[@]}"; do
  echo "k8s: kubernetes-validate --strict -k $version (${#MANIFESTS[@]} manifests)"
  "$VENV/bin/kubernetes-validate" --strict --quiet -k "$version" "${MANIFESTS[@]}"
done

# The table in the ConfigMap must pass `shardgate check`, like any table.
BIN=${SHARDGATE_BIN:-${CARGO_TARGET_DIR:-target}/debug/shardgate}
if [[ ! -x "$BIN" ]]; then
  echo "k8s: building $BIN"
  cargo build --quiet --bin shardgate
fi
table_dir=$(mktemp -d)
trap 'rm -rf "$table_dir"' EXIT
"$VENV/bin/python" - deploy/kubernetes/configmap.yaml "$table_dir/shardgate.yaml" <<'PY'
import sys, yaml
src, dst = sys.argv[1], sys.argv[2]
with open(src) as f:
    docs = [d for d in yaml.safe_load_all(f) if d]
tables = [d["data"]["shardgate.yaml"] for d in docs if d.get("kind") == "ConfigMap"]
if len(tables) != 1:
    sys.exit(f"k8s: expected one ConfigMap with data.shardgate.yaml in {src}, found {len(tables)}")
with open(dst, "w") as f:
    f.write(tables[0])
PY
echo "k8s: shardgate check (the ConfigMap's table)"
"$BIN" check -c "$table_dir/shardgate.yaml"

# The Deployment must mount the ConfigMap as a directory (no subPath: those
# mounts never see ConfigMap updates, so the table would not reload).
if grep -q 'subPath' deploy/kubernetes/deployment.yaml; then
  echo "k8s: deployment.yaml mounts with subPath; mount the table's directory so edits reload" >&2
  exit 1
fi
echo "k8s: all manifests valid"
