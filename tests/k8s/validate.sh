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

# Safety rules the manifests must keep (each is a way a change could quietly
# undo them): the admin token is required, a NetworkPolicy admits the admin
# port only from the monitoring namespace, and the disruption budget lets a
# node drain proceed at any replica count.
echo "k8s: admin token required, admin port fenced, disruption budget drainable"
"$VENV/bin/python" - "${MANIFESTS[@]}" <<'PY'
import sys, yaml
docs = []
for path in sys.argv[1:]:
    with open(path) as f:
        docs += [d for d in yaml.safe_load_all(f) if d]
by_kind = {}
for d in docs:
    by_kind.setdefault(d["kind"], []).append(d)
def fail(msg):
    sys.exit(f"k8s: {msg}")

(deploy,) = by_kind.get("Deployment", [None])
container = deploy["spec"]["template"]["spec"]["containers"][0]
token = [e for e in container.get("env", []) if e["name"] == "SHARDGATE_ADMIN_TOKEN"]
if len(token) != 1:
    fail("the Deployment does not set SHARDGATE_ADMIN_TOKEN")
ref = token[0].get("valueFrom", {}).get("secretKeyRef")
if not ref or ref.get("optional", False):
    fail("SHARDGATE_ADMIN_TOKEN must come from a Secret that is not optional")
admin_port = next(p["containerPort"] for p in container["ports"] if p["name"] == "admin")

policies = by_kind.get("NetworkPolicy", [])
labels = deploy["spec"]["template"]["metadata"]["labels"]
fenced = False
for np in policies:
    sel = np["spec"]["podSelector"].get("matchLabels", {})
    if any(labels.get(k) != v for k, v in sel.items()) or "Ingress" not in np["spec"].get("policyTypes", []):
        continue
    for rule in np["spec"].get("ingress", []):
        ports = [p.get("port") for p in rule.get("ports", [])]
        if "admin" in ports or admin_port in ports:
            sources = rule.get("from")
            if not sources:
                fail("a NetworkPolicy rule admits the admin port from everywhere")
            for s in sources:
                if "ipBlock" in s and s["ipBlock"]["cidr"] in ("0.0.0.0/0", "::/0"):
                    fail("a NetworkPolicy rule admits the admin port from 0.0.0.0/0")
                ns = s.get("namespaceSelector", {}).get("matchLabels", {})
                if "namespaceSelector" in s and ns != {"kubernetes.io/metadata.name": "monitoring"}:
                    fail(f"the admin port is admitted from namespaces {ns or 'all'}, not just monitoring")
            fenced = True
        elif not ports:
            fail("a NetworkPolicy rule without ports admits the admin port")
if not fenced:
    fail("no NetworkPolicy selects shardgate's pods and fences its admin port")

for pdb in by_kind.get("PodDisruptionBudget", []):
    if "minAvailable" in pdb["spec"] or pdb["spec"].get("maxUnavailable") != 1:
        fail("the PodDisruptionBudget must use maxUnavailable: 1 (minAvailable blocks drains when scaled down)")
PY
echo "k8s: all manifests valid"
