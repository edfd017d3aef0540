#!/usr/bin/env bash
# End-to-end test of the container image and docker-compose.yml.
#
# Runs the README's "Run it with Docker" commands (build script, docker build,
# docker-compose up -d, curl), with a unique compose project name, image tag,
# free 127.0.0.1 ports and a scratch copy of config/compose/ (so editing a
# table never touches the repository), then checks:
#   1. the image: under 20 MB, runs as a non-root user;
#   2. name resolution inside the static binary's containers (compose service
#      names through Docker's DNS, and /etc/hosts);
#   3. ids owned by each region, sent through the front door and through each
#      regional shardgate, reach that region's backend;
#   4. a create (POST with X-Country) mints an id that reads back from the
#      same region; mesh headers and ids sent from the host are not believed;
#   5. editing one region's table on the host changes routing, no restart;
#   6. live re-homing under load (tests/compose/rehoming.py, 64 clients): KZ
#      moved to eu and back, then a move aborted, by editing all four tables
#      phase by phase: no request fails, no KZ write reaches the old owner
#      after a switch;
#   7. with kz's backend stopped, kz's entities fail over to eu (or get 503);
# and always brings the stack down and removes what it created (trap).
#
# Skips (exit 0) when no Docker engine answers `docker info`. Every wait is
# bounded; the timings of each step are printed.
set -euo pipefail
cd "$(dirname "$0")/../.."

T0=$(date +%s)
say() { echo "compose: [$(($(date +%s) - T0))s] $*"; }
FAILED_WITH=""
fail() {
  FAILED_WITH="$*"
  echo "compose: FAIL: $*" >&2
  exit 1
}

if ! command -v docker >/dev/null 2>&1 || ! timeout 30 docker info >/dev/null 2>&1; then
  echo "compose: skipped: no Docker engine (docker info did not answer)"
  exit 0
fi
command -v docker-compose >/dev/null 2>&1 || fail "docker info answers but docker-compose is missing (Debian: apt-get install docker-compose)"
command -v curl >/dev/null 2>&1 || fail "curl is required"

ID="$(date +%s)-$$"
export COMPOSE_PROJECT_NAME="sgtest-$ID"
export SHARDGATE_IMAGE="shardgate:compose-test-$ID"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/shardgate-compose.XXXXXX")
export SHARDGATE_TABLES="$WORK/tables"
BIN=target/image/shardgate
IMAGE_BUILT=0
STACK_UP=0

cleanup() {
  local rc=$?
  set +e
  trap - EXIT INT TERM
  if ((STACK_UP)); then
    if ((rc != 0)); then
      echo "compose: --- state at failure ---"
      timeout 30 docker-compose ps
      timeout 30 docker-compose logs --no-color --tail 30
      echo "compose: --- the last answers other than 2xx and 3xx, by every instance ---"
      timeout 30 docker-compose logs --no-color | grep -E 'status=[45][0-9][0-9]' | tail -40
      echo "compose: --- the tables every instance applied or refused last ---"
      timeout 30 docker-compose logs --no-color | grep -E 'routing table|reload' | tail -40
    fi
    # The reason again, after the logs: a truncated output keeps its end.
    [[ -z "$FAILED_WITH" ]] || echo "compose: FAIL (again, below the logs): $FAILED_WITH" >&2
    say "docker-compose down -v --rmi local"
    timeout 120 docker-compose down -v --rmi local --remove-orphans --timeout 5 >/dev/null 2>&1 ||
      echo "compose: warning: docker-compose down failed; remove project $COMPOSE_PROJECT_NAME by hand" >&2
  fi
  if ((IMAGE_BUILT)); then
    docker rmi -f "$SHARDGATE_IMAGE" >/dev/null 2>&1 || echo "compose: warning: could not remove $SHARDGATE_IMAGE" >&2
  fi
  rm -rf "$WORK"
  if ((rc == 0)); then
    say "passed in $(($(date +%s) - T0))s"
  else
    say "failed (exit $rc) after $(($(date +%s) - T0))s; everything it created was removed"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Four free ports on 127.0.0.1: the front door and the three regional gateways.
read -r FRONT_PORT EU_PORT KZ_PORT US_PORT < <(python3 - <<'PY'
import socket
socks = [socket.socket() for _ in range(4)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])
PY
)
export SHARDGATE_BIND=127.0.0.1 SHARDGATE_PORT=$FRONT_PORT SHARDGATE_EU_PORT=$EU_PORT SHARDGATE_KZ_PORT=$KZ_PORT SHARDGATE_US_PORT=$US_PORT
FRONT="http://127.0.0.1:$FRONT_PORT"
declare -A GW=([eu]="http://127.0.0.1:$EU_PORT" [kz]="http://127.0.0.1:$KZ_PORT" [us]="http://127.0.0.1:$US_PORT")

mkdir -p "$SHARDGATE_TABLES"
cp config/compose/*.yaml "$SHARDGATE_TABLES/"
# The container's user (65532) reads them through the bind mount.
chmod 0755 "$SHARDGATE_TABLES" && chmod 0644 "$SHARDGATE_TABLES"/*.yaml

# --- build (the README's commands) -------------------------------------------
say "scripts/build-static.sh"
timeout 1200 scripts/build-static.sh
for t in "$SHARDGATE_TABLES"/*.yaml; do
  "$BIN" check -c "$t" >/dev/null || fail "$t does not pass shardgate check"
done
say "docker build -t $SHARDGATE_IMAGE ."
IMAGE_BUILT=1
timeout 300 docker build -q -t "$SHARDGATE_IMAGE" . >/dev/null

# A binary that is not static (a plain release build put where the script
# stages its own) is refused by the image build, naming the script.
REFUSED_TAG="shardgate:compose-refused-$ID"
mkdir -p "$WORK/context/target/image"
cp Dockerfile "$WORK/context/"
cp /bin/true "$WORK/context/target/image/shardgate"
if refusal=$(timeout 120 docker build -t "$REFUSED_TAG" "$WORK/context" 2>&1); then
  docker rmi -f "$REFUSED_TAG" >/dev/null 2>&1
  fail "docker build accepted a dynamically linked binary"
fi
grep -q "scripts-build-static.sh" <<<"$refusal" || fail "the refusal does not name scripts/build-static.sh: $refusal"
say "docker build refuses a dynamically linked binary, naming scripts/build-static.sh"

size=$(docker image inspect -f '{{.Size}}' "$SHARDGATE_IMAGE")
user=$(docker image inspect -f '{{.Config.User}}' "$SHARDGATE_IMAGE")
say "image $SHARDGATE_IMAGE: $size bytes ($((size / 1024)) KiB), user $user"
((size < 20 * 1000 * 1000)) || fail "the image is $size bytes, not under 20 MB"
[[ "$user" =~ ^[1-9][0-9]*(:[0-9]+)?$ ]] || fail "the image's user is '$user', not a non-root numeric uid"

# --- up ----------------------------------------------------------------------
say "docker-compose up -d (project $COMPOSE_PROJECT_NAME; front door $FRONT)"
STACK_UP=1
timeout 180 docker-compose up -d --quiet-pull 2>&1 | sed 's/^/  /'
[[ ${PIPESTATUS[0]} -eq 0 ]] || fail "docker-compose up failed"

SERVICES=(front eu-gw kz-gw us-gw eu-backend kz-backend us-backend)
deadline=$((SECONDS + 90))
while :; do
  unhealthy=()
  for s in "${SERVICES[@]}"; do
    cid=$(docker-compose ps -q "$s")
    status=$(docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}' "$cid" 2>/dev/null || echo missing)
    [[ "$status" == healthy ]] || unhealthy+=("$s=$status")
  done
  ((${#unhealthy[@]} == 0)) && break
  ((SECONDS < deadline)) || fail "not healthy after 90s: ${unhealthy[*]}"
  sleep 1
done
say "all ${#SERVICES[@]} containers healthy"

for s in front kz-backend; do
  uids=$(docker top "$(docker-compose ps -q "$s")" -eo pid,uid | awk 'NR > 1 { print $2 }' | sort -u | tr '\n' ' ')
  [[ "$uids" == "65532 " ]] || fail "$s runs as uid(s) '$uids', expected 65532 only"
done
say "processes run as uid 65532"

# --- name resolution inside the static binary --------------------------------
# glibc's getaddrinfo, linked statically, with the image's nsswitch.conf:
# compose service names through Docker's DNS server, localhost through /etc/hosts.
for url in http://kz-backend:9000/healthz http://us-gw:8080/.shardgate/ready http://localhost:9901/ready; do
  timeout 20 docker-compose exec -T front /shardgate probe "$url" || fail "front could not reach $url (name resolution?)"
done
say "service names and /etc/hosts resolve inside the container"

# --- requests ----------------------------------------------------------------
STATUS=""
BACKEND=""
# req METHOD URL [curl args…]: sets STATUS, BACKEND (the region in the JSON
# the backend answered, empty if none); headers in $WORK/h, body in $WORK/b.
req() {
  local method=$1 url=$2
  shift 2
  STATUS=$(curl -sS --max-time 10 -X "$method" -o "$WORK/b" -D "$WORK/h" -w '%{http_code}' "$@" "$url" || echo 000)
  BACKEND=$(python3 -c 'import json,sys
try: print(json.load(open(sys.argv[1])).get("region", ""))
except Exception: print("")' "$WORK/b")
}
header() { grep -i "^$1:" "$WORK/h" | head -1 | cut -d: -f2- | tr -d ' \r'; }
expect_backend() { # URL REGION WHAT
  req GET "$1"
  [[ "$STATUS" == 200 && "$BACKEND" == "$2" ]] ||
    fail "$3: expected 200 from the $2 backend, got $STATUS from '${BACKEND:-no backend}': $(head -c 300 "$WORK/b")"
}

# The README's example request.
readme_id=$("$BIN" mint --format iuid --country 7 --entity 3)
curl -sS --max-time 10 "$FRONT/v1/orders/$readme_id" | grep -q '"region": "kz"' || fail "the README's curl did not reach kz"

declare -A COUNTRY=([eu]=49 [kz]=7 [us]=1) SHARD=([eu]=2 [kz]=8 [us]=13)
n=0
for owner in eu kz us; do
  iuid=$("$BIN" mint --format iuid --country "${COUNTRY[$owner]}" --entity 3)
  uniq=$("$BIN" mint --format uniqid --shard-count 16 --shard "${SHARD[$owner]}")
  for entry in front eu kz us; do
    base=$FRONT
    [[ $entry == front ]] || base=${GW[$entry]}
    expect_backend "$base/v1/orders/$iuid" "$owner" "iuid of country ${COUNTRY[$owner]} via $entry"
    expect_backend "$base/v1/orders/$uniq" "$owner" "uniqid of shard ${SHARD[$owner]} via $entry"
    n=$((n + 2))
  done
done
req GET "$FRONT/v1/orders/not-an-id"
[[ "$STATUS" == 400 ]] || fail "a malformed id answered $STATUS, expected 400"
say "routing: $n requests reached the owner's backend (front door and each gateway); malformed id 400"

# --- the rest of the API: routes without an id --------------------------------
for entry in front eu kz us; do
  base=$FRONT
  [[ $entry == front ]] || base=${GW[$entry]}
  req POST "$base/login"
  [[ "$STATUS" == 200 && "$BACKEND" == eu ]] || fail "POST /login via $entry: got $STATUS from '${BACKEND:-no backend}', expected eu"
  local_region=$entry
  [[ $entry == front ]] && local_region=eu
  expect_backend "$base/v1/search?q=shoes" "$local_region" "search via $entry (its local region)"
  expect_backend "$base/api/v0/v1/things?x=1" us "the v0 prefix via $entry"
  python3 -c 'import json,sys; b=json.load(open(sys.argv[1])); sys.exit(0 if (b["path"], b["query"]) == ("/v1/things", "x=1") else 1)' "$WORK/b" ||
    fail "the v0 prefix via $entry reached us as $(head -c 200 "$WORK/b"), expected /v1/things?x=1"
  [[ "$(header x-api-version)" == v0 ]] || fail "the v0 prefix via $entry answered without X-Api-Version: v0"
done
say "no-id routes: login to eu, search to each gateway's own region, the v0 prefix rewritten for us"

# --- create and read back ----------------------------------------------------
for pair in KZ:kz US:us DE:eu; do
  country=${pair%%:*} owner=${pair##*:}
  req POST "$FRONT/v1/orders" -H "X-Country: $country" -H 'Content-Type: application/json' --data '{"from":"test"}'
  [[ "$STATUS" == 200 && "$BACKEND" == "$owner" ]] || fail "create for $country: got $STATUS from '${BACKEND:-no backend}'"
  minted=$(header x-entity-id)
  [[ -n "$minted" ]] || fail "create for $country: no X-Entity-Id in the answer"
  [[ "$(header location)" == "/v1/orders/$minted" ]] || fail "create for $country: Location is '$(header location)'"
  seen=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["headers"].get("x-entity-id",""))' "$WORK/b")
  [[ "$seen" == "$minted" ]] || fail "create for $country: the backend saw id '$seen', the client got '$minted'"
  "$BIN" decode --format iuid --json "$minted" | grep -q "\"country\":${COUNTRY[$owner]}\b" ||
    fail "create for $country: minted $minted does not carry country ${COUNTRY[$owner]}"
  expect_backend "$FRONT/v1/orders/$minted" "$owner" "read back of $minted (created for $country)"
done
say "create: ids minted for KZ, US and DE read back from kz, us and eu"

# --- the host is not a peer --------------------------------------------------
# A client on the host reaches the gateways from the network's gateway
# address, which no table trusts: its mesh headers are removed, and the id it
# sends with a create is replaced by a minted one.
kz_entity=$("$BIN" mint --format iuid --country 7 --entity 3)
for forged in 'X-Shardgate-Failover: kz, eu' 'Forwarded: by=_gw-eu' 'X-Shardgate-Hops: 9'; do
  expect_backend_with() { req GET "$1" -H "$forged"; [[ "$STATUS" == 200 && "$BACKEND" == kz ]]; }
  expect_backend_with "${GW[eu]}/v1/orders/$kz_entity" ||
    fail "'$forged' from the host: $STATUS from '${BACKEND:-no backend}' instead of 200 from kz"
done
us_id=$("$BIN" mint --format iuid --country 1 --entity 4)
req POST "$FRONT/v1/orders" -H 'X-Country: kz' -H "X-Entity-Id: $us_id" --data '{}'
[[ "$STATUS" == 200 && "$BACKEND" == kz ]] || fail "create with a client's id: $STATUS from '${BACKEND:-no backend}'"
[[ "$(header x-entity-id)" != "$us_id" ]] || fail "create kept the client's id $us_id"
say "mesh headers from the host are removed; a create's client-sent id is replaced by a minted one"

# --- live reload of one region's table ---------------------------------------
# kz's table moves FR (country 33) from eu to kz; kz-gw then serves FR's
# entities from its own backend. Written as editors do: new file, rename.
fr=$("$BIN" mint --format iuid --country 33 --entity 3)
expect_backend "${GW[kz]}/v1/orders/$fr" eu "FR via kz-gw before the edit"
kz_cid=$(docker-compose ps -q kz-gw)
started=$(docker inspect -f '{{.State.StartedAt}}' "$kz_cid")
grep -q '^  FR: { id: 33, region: eu }$' "$SHARDGATE_TABLES/kz.yaml" || fail "kz.yaml has no 'FR: { id: 33, region: eu }' line to edit"
sed 's/^  FR: { id: 33, region: eu }$/  FR: { id: 33, region: kz }/' "$SHARDGATE_TABLES/kz.yaml" >"$SHARDGATE_TABLES/.kz.yaml.new"
chmod 0644 "$SHARDGATE_TABLES/.kz.yaml.new"
mv -f "$SHARDGATE_TABLES/.kz.yaml.new" "$SHARDGATE_TABLES/kz.yaml"
edited=$SECONDS
deadline=$((SECONDS + 30))
until req GET "${GW[kz]}/v1/orders/$fr" && [[ "$STATUS" == 200 && "$BACKEND" == kz ]]; do
  ((SECONDS < deadline)) || fail "kz-gw still routes FR to '${BACKEND:-no backend}' ($STATUS) 30s after the edit"
  sleep 0.5
done
[[ "$(docker inspect -f '{{.State.StartedAt}}' "$kz_cid")" == "$started" ]] || fail "kz-gw restarted"
expect_backend "$FRONT/v1/orders/$fr" eu "FR via the front door (its table unchanged)"
say "reload: kz-gw routes FR to kz $((SECONDS - edited))s after the edit, without a restart"

# --- live re-homing under load ------------------------------------------------
# KZ moves from kz to eu and back while 64 clients on the host write and read
# KZ and read DE through the front door and every gateway (tests/compose/
# rehoming.py); then a third move is aborted. Each phase is a revision of all
# four tables (new file, rename), applied by their file watchers. No request
# may fail; after a switch has been applied, no KZ write may be answered by
# the old owner's backend.
for t in front eu kz us; do cp "$SHARDGATE_TABLES/$t.yaml" "$WORK/orig-$t.yaml"; done
phase() { # OWNER PHASE EPOCH: KZ's owner, and its move (none when PHASE is -)
  local t
  for t in front eu kz us; do
    sed "s/^  KZ: { id: 7, region: kz }$/  KZ: { id: 7, region: $1 }/" "$WORK/orig-$t.yaml" >"$SHARDGATE_TABLES/.$t.yaml.new"
    if [[ $2 != - ]]; then
      printf 'moves:\n  - { unit: "country KZ", to: %s, phase: %s, epoch: %s, hold: { max_time: 20s } }\n' \
        "$4" "$2" "$3" >>"$SHARDGATE_TABLES/.$t.yaml.new"
    fi
    chmod 0644 "$SHARDGATE_TABLES/.$t.yaml.new"
    mv -f "$SHARDGATE_TABLES/.$t.yaml.new" "$SHARDGATE_TABLES/$t.yaml"
  done
  echo "$(date +%s.%N) $1 $2 $3" >>"$WORK/phases"
  sleep 3
}
kz_order=$("$BIN" mint --format iuid --country 7 --entity 3)
de_order=$("$BIN" mint --format iuid --country 49 --entity 3)
rm -f "$WORK/stop" "$WORK/phases"
python3 tests/compose/rehoming.py "$WORK/load" "$WORK/stop" "$kz_order" "$de_order" \
  "$FRONT" "${GW[eu]}" "${GW[kz]}" "${GW[us]}" &
load_pid=$!
sleep 2
phase kz hold 1 eu
phase eu switch 2 eu
phase eu - 0
phase eu hold 3 kz
phase kz switch 4 kz
phase kz - 0
phase kz hold 5 eu
phase kz abort 5 eu
phase kz - 0
touch "$WORK/stop"
wait "$load_pid" || fail "the re-homing load generator failed"
python3 - "$WORK/load" "$WORK/phases" >"$WORK/rehoming" <<'PY' || fail "live re-homing under load: $(cat "$WORK/rehoming")"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
phases = [l.split() for l in open(sys.argv[2])]
t = {f"{p[1]} {p[2]}": float(p[0]) for p in phases}
failed = [r for r in rows if r["status"] != 200 or r["error"]]
# After each switch has been applied everywhere (written + 1 s), until the next hold:
# KZ writes answered by the new owner only.
windows = [(t["eu switch"] + 1, t["eu hold"], "eu"), (t["kz switch"] + 1, t["kz hold"], "kz")]
wrong = [r for r in rows if r["kind"] == "kz_write" for a, b, owner in windows if a < r["t"] < b and r["backend"] != owner]
writes = [r["ms"] for r in rows if r["kind"] == "kz_write"]
de = sorted(r["ms"] for r in rows if r["kind"] == "de_read")
p99 = de[int(len(de) * 0.99) - 1] if de else 0
print(f"  {len(rows)} requests, {len(failed)} failed; KZ writes: {len(writes)}, slowest {max(writes):.0f} ms; "
      f"DE reads p99 {p99:.0f} ms; KZ writes at the old owner after a switch: {len(wrong)}")
def phase_of(r):  # the phase written last before the request started, and how long before
    before = [p for p in phases if float(p[0]) <= r["t"]]
    return f"{before[-1][1]} {before[-1][2]} +{r['t'] - float(before[-1][0]):.2f}s" if before else "before the first"
for r in (failed + wrong)[:5]:
    print("  ", phase_of(r), r)
sys.exit(1 if failed or wrong or not writes else 0)
PY
sed 's/^/  /' "$WORK/rehoming"
for t in front eu kz us; do cp "$WORK/orig-$t.yaml" "$SHARDGATE_TABLES/.$t.yaml.new"; mv -f "$SHARDGATE_TABLES/.$t.yaml.new" "$SHARDGATE_TABLES/$t.yaml"; done
sleep 2
say "re-homing: KZ moved to eu and back and a move aborted under load: no request failed, no KZ write at the old owner after a switch"

# --- a region's backend goes away --------------------------------------------
kz_id=$("$BIN" mint --format iuid --country 7 --entity 3)
say "docker-compose stop kz-backend"
timeout 60 docker-compose stop -t 5 kz-backend 2>&1 | sed 's/^/  /'
# Once the health checks (1s interval, fall 2) mark kz-backend down, kz's
# table fails kz over to eu (GET is idempotent): the eu backend answers, or
# the gateway answers 503 when it cannot fail over. Other answers on the way
# (502 before the health checks notice, 508 if a failover peer sends the
# request back) are printed, and must give way to one of those within 30s.
reason_of() { python3 -c 'import json,sys
try: print(json.load(open(sys.argv[1])).get("reason", ""))
except Exception: print("")' "$WORK/b"; }
for entry in kz-gw front; do
  base=${GW[kz]}
  [[ $entry == front ]] && base=$FRONT
  deadline=$((SECONDS + 30))
  seen=()
  while :; do
    req GET "$base/v1/orders/$kz_id"
    if [[ "$STATUS" == 200 && "$BACKEND" == eu ]]; then
      outcome="failed over: answered by the eu backend"
      break
    elif [[ "$STATUS" == 503 ]]; then
      outcome="503 ($(reason_of))"
      break
    fi
    this="$STATUS${BACKEND:+ from $BACKEND}$(r=$(reason_of) && [[ -n $r ]] && echo " ($r)")"
    [[ ${#seen[@]} -gt 0 && "${seen[-1]}" == "$this" ]] || seen+=("$this")
    ((SECONDS < deadline)) ||
      fail "via $entry with kz-backend stopped: no failover to eu and no 503 within 30s; answers: ${seen[*]}"
    sleep 0.5
  done
  say "kz-backend stopped: kz's entity via $entry: $outcome${seen[*]:+; before that: $(IFS=,; echo "${seen[*]}")}"
done
# Entities of other regions are unaffected.
expect_backend "$FRONT/v1/orders/$("$BIN" mint --format iuid --country 1 --entity 3)" us "US via the front door with kz-backend down"
