#!/usr/bin/env python3
"""Routed-workload comparison: direct backend vs nginx vs HAProxy vs shardgate.

Workload: HTTP/1.1 keep-alive, N connections, GET /v1/orders/{iUID} with ids
drawn at random from a generated list spanning three regions, and the same
with the id in the X-Entity-Id header. nginx and HAProxy route with regex
captures on the iUID's country digits (the only way they can); shardgate
decodes the id. Proxy pinned to core 1, load generator and backends to core 0,
for every proxy alike. Each configuration is repeated (alternating) and the
table shows medians, then each proxy's ratios to nginx within each
repetition (median, range, and how many repetitions it was ahead): the
host's speed drifts during a run, and measurements minutes apart compare
better than medians a run apart. `--from-log FILE` prints the tables again
from a saved run's output, measuring nothing.

Each repetition also gives what the request cost the load core (wrk's and
the backends' CPU a request) and how busy each core was: on two cores the
load core is as busy as the proxy's, and where it saturates it sets req/s.
By default nginx and HAProxy add nothing to the messages they forward;
`--same-fields` has them add what shardgate adds (X-Forwarded-For, -Proto,
-Host, a request id and Via upstream, the request id and Via to the answer),
so that the backends and wrk parse the same fields and each proxy makes
them. The request ids differ in how they are made: nginx's `$request_id` is
32 hex digits from OpenSSL's RAND_bytes, HAProxy's `uuid()` a UUIDv4,
shardgate's a UUIDv7 from a thread-local generator.

On a VM the hypervisor moves the two virtual CPUs between host cores that
share a cache and cores that do not, and the second placement makes every
process's socket calls cost about a quarter more (coreping.c). Each run is
marked near, far or mixed by a cache line's round trip between the cores,
timed before and after it, and where the cores moved during the run the
ratios are given again over the repetitions where both runs had the same
placement.

wrk's latency distribution (p10, p90, mean, standard deviation) is kept
beside its p50 and p99 and shown against the core that saturated: in a
closed loop each connection's cycle is set by req/s, and how far the p99
sits above it by where the requests queue (spread()).

Last, the goals for shardgate (CPU a request below nginx's and HAProxy's,
req/s above both, p99 and RSS no higher than nginx's, no errors) are judged
by the run's medians, and each is given the share of redraws of the run's
repetitions in which it holds: how firm its margin is. With `--baseline`
the same is given for the baseline; when it is the same source, the two
show how far one run's verdict is from certain. The same-repetition ratios
are also given as a geometric mean with a bootstrap interval, which pools
the runs of a joined log.
"""
import argparse
import math
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARDGATE = os.path.join(ROOT, "target", "release", "shardgate")
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
WRK = shutil.which("wrk") or "/usr/bin/wrk"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")

REGIONS = {"eu": 49, "kz": 7, "us": 1}  # region -> country id (hex 31, 07, 01)
BACKEND_PORTS = {"eu": 19101, "kz": 19102, "us": 19103}
PROXY_PORT = 19100
PROXY_CORE = "1"
LOAD_CORE = "0"


def free(port):
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def wait_port(port, proc, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            raise RuntimeError(f"{' '.join(proc.args)} exited with {proc.returncode}: {err}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"port {port} did not open")


def pids_of(proc):
    """The process and its children (nginx master + workers)."""
    pids = [proc.pid]
    try:
        out = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout
        pids += [int(p) for p in out.split()]
    except OSError:
        pass
    return pids


def cpu_ticks(pids):
    """(utime, stime) of the processes, in clock ticks."""
    user = system = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            user += int(fields[11])
            system += int(fields[12])
        except OSError:
            pass
    return user, system


def core_busy():
    """Per-core (busy, total) jiffies from /proc/stat, for the cores the
    benchmark pins to: how close each came to saturation during a run."""
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            name, *vals = line.split()
            if name in (f"cpu{PROXY_CORE}", f"cpu{LOAD_CORE}"):
                v = list(map(int, vals))
                idle = v[3] + v[4]  # idle + iowait
                out[name[3:]] = (sum(v[:8]) - idle, sum(v[:8]))
    return out


def busy_pct(before, after, core):
    """The share of the time between two core_busy() readings that a core
    was busy, in percent; time the hypervisor gave the core to another
    guest (steal) counts as busy, since the core could not run ours."""
    (b0, t0), (b1, t1) = before[core], after[core]
    return 100.0 * (b1 - b0) / max(t1 - t0, 1)


def coreping(tmp):
    """A function that times a cache line's round trip between the proxy's
    core and the load core (coreping.c, compiled here once), in ns, or 0 if
    that fails; None where it cannot be compiled. See coreping.c for why it
    matters."""
    cc = shutil.which("cc") or shutil.which("gcc")
    exe = os.path.join(tmp, "coreping")
    source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "coreping.c")
    built = cc and subprocess.run([cc, "-O2", "-pthread", "-o", exe, source], stderr=subprocess.PIPE,
                                  text=True).returncode == 0
    if not built:
        print(f"load: coreping.c did not compile ({cc or 'no C compiler'}); the cores' placement is not measured",
              file=sys.stderr)
        return None

    def ping():
        try:
            out = subprocess.run([exe, PROXY_CORE, LOAD_CORE], capture_output=True, text=True, check=True, timeout=30)
            return int(out.stdout)
        except (subprocess.SubprocessError, ValueError) as e:
            print(f"load: coreping failed ({e}); this run's placement is not measured", file=sys.stderr)
            return 0
    return ping


def rss_kib(pids):
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def start(cmd, core, **kw):
    return subprocess.Popen(["taskset", "-c", core] + cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kw)


def stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def one_proxy_workload(prefix, binary=None, wrap=(), front_door=False):
    """What the tools that run one shardgate at a time (instructions.py,
    train.py) share with a run: a temporary directory, the backends started
    on the load core and answering, 1000 ids a region minted and the table
    written (with `front_door`, also the routes of the `pinned` and `ruled`
    modes, which older builds cannot read). `wrap` goes before the backends'
    command (a profiler). Returns
    (directory, backend process, ids, table path); the caller stops the
    backend with stop()."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    with open(os.path.join(tmp, "backend.conf"), "w") as f:
        f.write(backend_conf(tmp))
    backend = start([*wrap, NGINX, "-c", os.path.join(tmp, "backend.conf"), "-p", tmp], LOAD_CORE)
    try:
        for port in BACKEND_PORTS.values():
            wait_port(port, backend, timeout=60 if wrap else 10)
        ids = mint_ids(1000, binary)
        config = os.path.join(tmp, "shardgate.yaml")
        with open(config, "w") as f:
            f.write(shardgate_conf() + (FRONT_DOOR_ROUTES if front_door else ""))
    except BaseException:
        stop(backend)
        raise
    return tmp, backend, ids, config


def mint_ids(n, binary=None):
    ids = {}
    for region, country in REGIONS.items():
        out = subprocess.run([binary or SHARDGATE, "mint", "--format", "iuid", "-n", str(n), "--country", str(country),
                              "--entity", "3"], check=True, capture_output=True, text=True).stdout
        ids[region] = out.split()
    return ids


def backend_conf(tmp):
    servers = "\n".join(
        f"  server {{ listen 127.0.0.1:{port} backlog=4096; keepalive_requests 1000000;\n"
        f"    location / {{ add_header X-Backend-Region {region}; return 200 '{region}\\n'; }} }}"
        for region, port in BACKEND_PORTS.items())
    return f"""daemon off; master_process off; worker_processes 1; pid {tmp}/backend.pid; error_log {tmp}/backend.err;
events {{ worker_connections 4096; }}
http {{ access_log off; {servers} }}
"""


ID_RE = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-80"


# With --same-fields, nginx and HAProxy add to each request and answer the
# fields shardgate adds (X-Forwarded-*, a request id, Via), so that the three
# hand the backends and wrk the same work; without it they add nothing, as a
# bare configuration of each does.
NGINX_SAME_FIELDS = """
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for; proxy_set_header X-Forwarded-Proto $scheme;
      proxy_set_header X-Forwarded-Host $http_host; proxy_set_header X-Request-Id $request_id;
      proxy_set_header Via "1.1 nginx"; add_header X-Request-Id $request_id; add_header Via "1.1 nginx";"""
HAPROXY_SAME_FIELDS = """  option forwardfor
  unique-id-format %[uuid()]
  unique-id-header X-Request-Id
  http-request set-header X-Forwarded-Proto http
  http-request set-header X-Forwarded-Host %[req.hdr(host)]
  http-request set-header Via "1.1 haproxy"
  http-response set-header X-Request-Id %[unique-id]
  http-response set-header Via "1.1 haproxy"
"""


def nginx_conf(tmp, same_fields=False):
    extra = NGINX_SAME_FIELDS if same_fields else ""
    ups = "\n".join(f"  upstream {r} {{ server 127.0.0.1:{p}; keepalive 64; }}" for r, p in BACKEND_PORTS.items())
    path_map = "\n".join(f'    "~^/v1/orders/{ID_RE}{c:02x}-" {r};' for r, c in REGIONS.items())
    hdr_map = "\n".join(f'    "~^{ID_RE}{c:02x}-" {r};' for r, c in REGIONS.items())
    return f"""daemon off; worker_processes 1; pid {tmp}/nginx.pid; error_log {tmp}/nginx.err;
events {{ worker_connections 4096; }}
http {{
  access_log off;
{ups}
  map $uri $by_path {{
    default "";
{path_map}
  }}
  map $http_x_entity_id $by_header {{
    default "";
{hdr_map}
  }}
  server {{
    listen 127.0.0.1:{PROXY_PORT} backlog=4096; keepalive_requests 1000000;
    location = /v1/orders {{
      if ($by_header = "") {{ return 400; }}
      proxy_pass http://$by_header; proxy_http_version 1.1; proxy_set_header Connection "";{extra}
    }}
    location /v1/orders/ {{
      if ($by_path = "") {{ return 400; }}
      proxy_pass http://$by_path; proxy_http_version 1.1; proxy_set_header Connection "";{extra}
    }}
  }}
}}
"""


def haproxy_conf(tmp, same_fields=False):
    acls = []
    for r, c in REGIONS.items():
        acls.append(f"  acl p_{r} path_reg ^/v1/orders/{ID_RE}{c:02x}-")
        acls.append(f"  acl h_{r} req.hdr(x-entity-id) -m reg ^{ID_RE}{c:02x}-")
        acls.append(f"  use_backend {r} if p_{r} or h_{r}")
    backends = "\n".join(
        f"backend {r}\n  http-reuse always\n  server s1 127.0.0.1:{p} maxconn 1000" for r, p in BACKEND_PORTS.items())
    return f"""global
  nbthread 1
  maxconn 4000
defaults
  mode http
  option http-keep-alive
  timeout connect 5s
  timeout client 30s
  timeout server 30s
frontend fe
  bind 127.0.0.1:{PROXY_PORT}
{HAPROXY_SAME_FIELDS if same_fields else ""}{chr(10).join(acls)}
  default_backend none
backend none
  http-request deny deny_status 400
{backends}
"""


# The routes of compare.py's workload: the id in the path, or in a header.
ORDERS_ROUTES = """  - name: orders
    match: { path: "/v1/orders/{id}", methods: [GET] }
    id: { path_param: id, formats: [iuid] }
  - name: orders-by-header
    match: { path: "/v1/orders", methods: [GET] }
    id: { header: X-Entity-Id, formats: [iuid] }
"""


def shardgate_conf(ports=None, scheme="http", proxy_port=PROXY_PORT, routes=ORDERS_ROUTES):
    """shardgate's table for the workload: the regions' backends on `ports`
    (default BACKEND_PORTS) spoken to as `scheme`, and `routes`."""
    ports = ports or BACKEND_PORTS
    regions = "\n".join(f'  {r}: {{ upstreams: ["{scheme}://127.0.0.1:{p}"] }}' for r, p in ports.items())
    countries = "\n".join(f"  C{c}: {{ id: {c}, region: {r} }}" for r, c in REGIONS.items())
    return f"""version: 1
listen: 127.0.0.1:{proxy_port}
admin: 127.0.0.1:{proxy_port + 50}
regions:
{regions}
countries:
{countries}
entities: {{ IntercityOrder: 3 }}
upstream: {{ health: {{ interval: 0s }} }}
log: {{ access: false }}
routes:
""" + routes


# The routes of the `pinned` mode (a prefix route without an id, every
# request to one region), the `ruled` mode (the path mode's route with
# three header rules: two on the request, one on the answer, with the
# request's values) and the `fixed` mode (the same three with fixed values).
FRONT_DOOR_ROUTES = """  - name: pinned
    match: { prefix: "/v1/pinned/" }
    to: { region: eu }
  - name: ruled
    match: { path: "/v1/ruled/{id}", methods: [GET] }
    id: { path_param: id, formats: [iuid] }
    headers:
      request: { set: { X-Tenant: "{country}", X-Route: "{route}" } }
      response: { set: { X-Served-By: "{region}" } }
  - name: fixed
    match: { path: "/v1/fixed/{id}", methods: [GET] }
    id: { path_param: id, formats: [iuid] }
    headers:
      request: { set: { X-Tenant: acme, X-Env: prod } }
      response: { set: { Strict-Transport-Security: "max-age=31536000" } }
"""

# Where each mode's requests go, before the id.
MODE_PATHS = {"path": "/v1/orders/", "pinned": "/v1/pinned/", "ruled": "/v1/ruled/", "fixed": "/v1/fixed/"}


def lua_script(tmp, ids, mode):
    flat = [i for lst in ids.values() for i in lst]
    random.Random(7).shuffle(flat)
    path = os.path.join(tmp, f"wrk-{mode}.lua")
    with open(path, "w") as f:
        f.write("local ids = {" + ",".join(f'"{i}"' for i in flat) + "}\n")
        # Each request is formatted once, in init() (where wrk has set Host),
        # and request() only picks one: the load core (wrk and the backends)
        # is the one that saturates, and a wrk.format on every request was
        # part of its cost (wrk's SCRIPTING notes: pre-generate requests in
        # init() when testing a fast server).
        f.write("local n = #ids\nlocal reqs = {}\n")
        if mode == "header":
            fmt = 'wrk.format("GET", "/v1/orders", {["X-Entity-Id"] = ids[i]})'
        else:
            fmt = f'wrk.format("GET", "{MODE_PATHS[mode]}" .. ids[i])'
        f.write(f"init = function(args)\n  for i = 1, n do reqs[i] = {fmt} end\n  math.randomseed(42)\nend\n")
        f.write("request = function() return reqs[math.random(n)] end\n")
        f.write(WRK_DONE)
    return path


# wrk's summary as one line that run_wrk reads.
WRK_DONE = """done = function(summary, latency, requests)
  io.write(string.format("RESULT requests=%d errors=%d non2xx=%d p50=%d p99=%d p10=%d p90=%d mean=%d sd=%d\\n",
    summary.requests, summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    summary.errors.status, latency:percentile(50), latency:percentile(99), latency:percentile(10),
    latency:percentile(90), latency.mean, latency.stdev))
end
"""


def check_routing(port, ids, mode, direct_region=None):
    """Every sampled id must reach the backend of its region."""
    for region, lst in ids.items():
        for i in lst[:20]:
            if mode == "header":
                req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/orders", headers={"X-Entity-Id": i})
            else:
                req = urllib.request.Request(f"http://127.0.0.1:{port}{MODE_PATHS[mode]}{i}")
            with urllib.request.urlopen(req, timeout=5) as resp:
                got = resp.headers.get("X-Backend-Region")
            want = direct_region or ("eu" if mode == "pinned" else region)
            if got != want:
                raise RuntimeError(f"routing check failed on port {port} ({mode}): {i} went to {got}, want {want}")


def run_wrk(port, script, duration, conns, scheme="http"):
    cmd = ["taskset", "-c", LOAD_CORE, WRK, "-t", "1", "-c", str(conns), "-d", f"{duration}s", "--timeout", "5s",
           "-s", script, f"{scheme}://127.0.0.1:{port}"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 30).stdout
    m = re.search(r"RESULT requests=(\d+) errors=(\d+) non2xx=(\d+) p50=(\d+) p99=(\d+) p10=(\d+) p90=(\d+) "
                  r"mean=(\d+) sd=(\d+)", out)
    if not m:
        raise RuntimeError(f"wrk output not understood:\n{out}")
    req, err, non2xx, p50, p99, p10, p90, mean, sd = map(int, m.groups())
    return {"requests": req, "errors": err + non2xx, "rps": req / duration, "p50_us": p50, "p99_us": p99,
            "p10_us": p10, "p90_us": p90, "mean_us": mean, "sd_us": sd}


def measure(name, port, pids, backend_pids, script, duration, conns, ping=None, scheme="http"):
    run_wrk(port, script, 2, conns, scheme)  # warm-up: connections, pools, caches
    ping_before = ping() if ping else 0
    u0, s0 = cpu_ticks(pids)
    b0, l0, c0 = cpu_ticks(backend_pids), os.times(), core_busy()
    r = run_wrk(port, script, duration, conns, scheme)
    u1, s1 = cpu_ticks(pids)
    b1, l1, c1 = cpu_ticks(backend_pids), os.times(), core_busy()
    r["ping_before_ns"], r["ping_after_ns"] = ping_before, ping() if ping else 0
    us_per_req = 1e6 / max(r["requests"], 1)  # seconds of CPU in all -> us a request
    per_req = us_per_req / CLK_TCK  # clock ticks in all -> us a request
    r["usr_us_per_req"] = (u1 - u0) * per_req
    r["sys_us_per_req"] = (s1 - s0) * per_req
    r["cpu_us_per_req"] = r["usr_us_per_req"] + r["sys_us_per_req"]
    # What the request costs the other side of the benchmark (wrk, a waited
    # child, and the backends, all on the load core), and how busy each core
    # was: the proxy's core is not always the one that sets the rate.
    wrk_s = (l1.children_user - l0.children_user) + (l1.children_system - l0.children_system)
    r["wrk_us_per_req"] = wrk_s * us_per_req
    r["backend_us_per_req"] = (sum(b1) - sum(b0)) * per_req
    r["proxy_core_pct"] = busy_pct(c0, c1, PROXY_CORE)
    r["load_core_pct"] = busy_pct(c0, c1, LOAD_CORE)
    r["rss_mib"] = rss_kib(pids) / 1024 if pids else 0.0
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--ids-per-region", type=int, default=1000)
    ap.add_argument("--only", default="direct,nginx,haproxy,shardgate")
    ap.add_argument("--binary", metavar="BIN", default=SHARDGATE,
                    help="the shardgate binary measured as proxy 'shardgate' (default: target/release/shardgate)")
    ap.add_argument("--baseline", metavar="BIN",
                    help="also run this shardgate binary (an earlier build), as proxy 'baseline'")
    ap.add_argument("--same-fields", action="store_true",
                    help="nginx and HAProxy add the fields shardgate adds (X-Forwarded-*, X-Request-Id, Via)")
    ap.add_argument("--from-log", metavar="FILE",
                    help="measure nothing: summarise the repetitions a saved run printed")
    args = ap.parse_args()
    if args.from_log:
        results, names, reps = from_log(args.from_log)
        if not results:
            sys.exit(f"load: no repetitions found in {args.from_log}")
        # A run's log gives its length and connections in its medians'
        # heading; the options stand for logs without one, or runs of
        # different settings joined.
        with open(args.from_log) as f:
            shapes = set(MEDIANS_LINE.findall(f.read()))
        duration, connections = map(int, next(iter(shapes))) if len(shapes) == 1 else (args.duration, args.connections)
        summarise(results, names, reps, duration, connections)
        return
    for p in [PROXY_PORT, PROXY_PORT + 50, *BACKEND_PORTS.values()]:
        if not free(p):
            sys.exit(f"load: port {p} is busy")
    tmp = tempfile.mkdtemp(prefix="shardgate-load-")
    ping = coreping(tmp)
    ids = mint_ids(args.ids_per_region, args.binary)
    scripts = {m: lua_script(tmp, ids, m) for m in ("path", "header")}
    with open(f"{tmp}/backend.conf", "w") as f:
        f.write(backend_conf(tmp))
    with open(f"{tmp}/nginx.conf", "w") as f:
        f.write(nginx_conf(tmp, args.same_fields))
    with open(f"{tmp}/haproxy.cfg", "w") as f:
        f.write(haproxy_conf(tmp, args.same_fields))
    with open(f"{tmp}/shardgate.yaml", "w") as f:
        f.write(shardgate_conf())
    proxies = {
        "nginx": [NGINX, "-c", f"{tmp}/nginx.conf", "-p", tmp],
        "haproxy": [HAPROXY, "-f", f"{tmp}/haproxy.cfg", "-db"],
        "shardgate": [args.binary, "--threads", "1", "serve", "-c", f"{tmp}/shardgate.yaml"],
    }
    names = ["direct", "nginx", "haproxy", "shardgate"]
    if args.baseline:
        proxies["baseline"] = [args.baseline, "--threads", "1", "serve", "-c", f"{tmp}/shardgate.yaml"]
        names.append("baseline")
    only = args.only.split(",") + (["baseline"] if args.baseline else [])
    backend = start([NGINX, "-c", f"{tmp}/backend.conf", "-p", tmp], LOAD_CORE)
    results = {}
    try:
        for port in BACKEND_PORTS.values():
            wait_port(port, backend)
        backend_pids = pids_of(backend)
        for rep in range(args.reps):
            order = [n for n in names if n in only]
            if rep % 2:
                order.reverse()  # alternate, so drift hurts no proxy in particular
            # The modes alternate too: a proxy's second mode runs in a host
            # state some seconds later than its first.
            modes = ("path", "header") if rep % 2 == 0 else ("header", "path")
            for name in order:
                for mode in modes:
                    if name == "direct":
                        if mode == "header":
                            continue
                        port, pids, proc = BACKEND_PORTS["eu"], [], None
                        check_routing(port, {"eu": ids["eu"]}, "path", direct_region="eu")
                    else:
                        proc = start(proxies[name], PROXY_CORE)
                        wait_port(PROXY_PORT, proc)
                        port, pids = PROXY_PORT, pids_of(proc)
                        check_routing(port, ids, mode)
                    try:
                        r = measure(name, port, pids, backend_pids, scripts[mode], args.duration, args.connections,
                                    ping)
                    finally:
                        if proc is not None:
                            stop(proc)
                            time.sleep(0.3)
                    r["rep"] = rep + 1
                    results.setdefault((name, mode), []).append(r)
                    print(f"rep {rep + 1} {name:<9} {mode:<6} {r['rps']:>9.0f} req/s  p50 {r['p50_us']:>5} us  "
                          f"p99 {r['p99_us']:>6} us  cpu/req {r['cpu_us_per_req']:>6.2f} us "
                          f"(usr {r['usr_us_per_req']:.1f} sys {r['sys_us_per_req']:.1f})  "
                          f"rss {r['rss_mib']:>5.1f} MiB  errors {r['errors']}  "
                          f"wrk {r['wrk_us_per_req']:.2f} backend {r['backend_us_per_req']:.2f} us/req  "
                          f"busy proxy core {r['proxy_core_pct']:.0f}% load core {r['load_core_pct']:.0f}%"
                          + (f"  cores {r['ping_before_ns']}/{r['ping_after_ns']} ns"
                             if r["ping_before_ns"] and r["ping_after_ns"] else "")
                          + f"  latency p10 {r['p10_us']} p90 {r['p90_us']} mean {r['mean_us']} sd {r['sd_us']} us",
                          flush=True)
    finally:
        stop(backend)
    summarise(results, names, args.reps, args.duration, args.connections)
    shutil.rmtree(tmp, ignore_errors=True)


MEDIANS_LINE = re.compile(r"^Medians over \d+ repetitions, (\d+)s each, (\d+) connections", re.M)
REP_LINE = re.compile(r"rep (\d+) (\S+)\s+(\S+)\s+(\d+) req/s\s+p50\s+(\d+) us\s+p99\s+(\d+) us\s+cpu/req\s+([\d.]+) us "
                      r"\(usr ([\d.]+) sys ([\d.]+)\)\s+rss\s+([\d.]+) MiB\s+errors (\d+)"
                      r"(?:\s+wrk ([\d.]+) backend ([\d.]+) us/req\s+busy proxy core (\d+)% load core (\d+)%)?"
                      r"(?:\s+cores (\d+)/(\d+) ns)?"
                      r"(?:\s+latency p10 (\d+) p90 (\d+) mean (\d+) sd (\d+) us)?")


def from_log(path):
    """The repetitions a saved run printed, for summarise(). A log joined
    from several runs numbers its repetitions from 1 again in each; each
    repetition is marked with its run, so that only runs of one repetition
    of one run are compared."""
    results, names, run, last, seen = {}, [], 0, 0, set()
    with open(path) as f:
        for line in f:
            m = REP_LINE.match(line)
            if not m:
                continue
            rep, name, mode = int(m.group(1)), m.group(2), m.group(3)
            # A new run starts where the numbers go back, or where a
            # configuration's repetition comes again (a run of one).
            if rep < last or (rep, name, mode) in seen:
                run, seen = run + 1, set()
            last = rep
            seen.add((rep, name, mode))
            rps, p50, p99, cpu, usr, sys_, rss, errors = map(float, m.groups()[3:11])
            r = {"run": run, "rep": rep, "rps": rps, "p50_us": p50, "p99_us": p99, "cpu_us_per_req": cpu,
                 "usr_us_per_req": usr, "sys_us_per_req": sys_, "rss_mib": rss, "errors": errors}
            if m.group(12) is not None:  # logs from before the load core was measured lack these
                r.update(zip(("wrk_us_per_req", "backend_us_per_req", "proxy_core_pct", "load_core_pct"),
                             map(float, m.groups()[11:15])))
            if m.group(16) is not None:  # and logs from before the cores' placement was timed, these
                r["ping_before_ns"], r["ping_after_ns"] = int(m.group(16)), int(m.group(17))
            if m.group(18) is not None:  # and logs from before wrk's spread was kept, these
                r.update(zip(("p10_us", "p90_us", "mean_us", "sd_us"), map(float, m.groups()[17:21])))
            results.setdefault((name, mode), []).append(r)
            if name not in names:
                names.append(name)
    order = ["direct", "nginx", "haproxy", "shardgate", "baseline"]
    # Runs joined in one log count together: the most repetitions any
    # configuration has.
    reps = max((len(v) for v in results.values()), default=0)
    return results, sorted(names, key=lambda n: order.index(n) if n in order else len(order)), reps


def placements(results):
    """Marks each run near, far or mixed: where the hypervisor had the two
    cores (coreping.c), from the round trips timed before and after it. The
    round trips of the whole run are split at the widest step between two
    neighbours in size, if the longest is over twice the shortest; a run
    whose two fall on different sides is mixed (the cores moved during it),
    and where there is no such step every run is marked `one` (a single
    placement). Returns whether the cores moved during the run."""
    runs = [r for v in results.values() for r in v if r.get("ping_before_ns") and r.get("ping_after_ns")]
    pings = sorted(r[k] for r in runs for k in ("ping_before_ns", "ping_after_ns"))
    if not pings or pings[-1] <= 2 * pings[0]:
        for r in runs:
            r["placement"] = "one"
        return False
    _, limit = max((b / a, b) for a, b in zip(pings, pings[1:]))
    for r in runs:
        near = (r["ping_before_ns"] < limit, r["ping_after_ns"] < limit)
        r["placement"] = "near" if all(near) else "far" if not any(near) else "mixed"
    return True


def by_repetition(runs):
    """A configuration's runs keyed by run and repetition."""
    keyed = {(r.get("run", 0), r.get("rep", i + 1)): r for i, r in enumerate(runs)}
    assert len(keyed) == len(runs), "two runs of one configuration with the same run and repetition"
    return keyed


def pairs_with_nginx(results, names):
    """Each proxy's runs and nginx's of the same repetition, by proxy and
    mode: (name, mode, [(its run, nginx's run)])."""
    for name in names:
        for mode in ("path", "header"):
            mine, ng = results.get((name, mode)), results.get(("nginx", mode))
            if name in ("nginx", "direct") or not mine or not ng:
                continue
            ng_at = by_repetition(ng)
            yield name, mode, [(r, ng_at[k]) for k, r in by_repetition(mine).items() if k in ng_at]


def paired(results, names, same_placement=False):
    """Each proxy against nginx within each repetition (measured minutes
    apart, not a whole run apart): the median ratio, its range, and in how
    many repetitions the proxy was ahead. On a shared host whose speed drifts
    during a run, these say more than the ratio of two medians. With
    same_placement, only the repetitions where both runs had the cores in
    the same place, near or far."""
    print()
    if same_placement:
        print("The same, only repetitions where both runs had the cores in the same placement (both near or both far)")
    else:
        print("Against nginx in the same repetition: median ratio (range), repetitions ahead of nginx")
    print(f"{'proxy':<10}{'ids in':<8}{'cpu/nginx':>26}{'rps/nginx':>26}{'p99/nginx':>26}")
    for name, mode, pairs in pairs_with_nginx(results, names):
        if same_placement:
            pairs = [(a, b) for a, b in pairs if a.get("placement") == b.get("placement") in ("near", "far")]
        cells = []
        for field, lower_is_better in (("cpu_us_per_req", True), ("rps", False), ("p99_us", True)):
            ratios = [a[field] / b[field] for a, b in pairs if b[field]]
            if not ratios:
                cells.append("-")
                continue
            ahead = sum(1 for r in ratios if (r < 1 if lower_is_better else r > 1))
            cells.append(f"{statistics.median(ratios):.3f} ({min(ratios):.2f}-{max(ratios):.2f}) {ahead}/{len(ratios)}")
        print(f"{name:<10}{mode:<8}" + "".join(f"{c:>26}" for c in cells))


def paired_interval(results, names):
    """The same-repetition ratios to nginx once more, as their geometric
    mean with a 95% bootstrap interval (20,000 seeded redraws of the
    repetitions): a figure whose interval lies wholly on one side of 1 is
    ahead or behind beyond the noise between these repetitions. The runs of
    a log joined with `--from-log` pool here, repetition by repetition; how
    much whole runs differ is not in the interval."""
    print()
    print("Against nginx in the same repetition: geometric mean of the ratios [95% bootstrap interval]")
    print(f"{'proxy':<10}{'ids in':<8}{'n':>4}{'cpu/nginx':>24}{'rps/nginx':>24}{'p99/nginx':>24}")
    for name, mode, pairs in pairs_with_nginx(results, names):
        cells = []
        for field in ("cpu_us_per_req", "rps", "p99_us"):
            logs = [math.log(a[field] / b[field]) for a, b in pairs if a[field] > 0 and b[field] > 0]
            if not logs:
                cells.append("-")
                continue
            # Seeded by the figure, so that a bound does not move with
            # what else the log holds.
            rng = random.Random(f"{name}:{mode}:{field}")
            means = sorted(statistics.fmean(rng.choices(logs, k=len(logs))) for _ in range(INTERVAL_REDRAWS))
            lo, hi = means[int(0.025 * INTERVAL_REDRAWS)], means[int(0.975 * INTERVAL_REDRAWS) - 1]
            cells.append(f"{math.exp(statistics.fmean(logs)):.3f} [{math.exp(lo):.3f}-{math.exp(hi):.3f}]")
        print(f"{name:<10}{mode:<8}{len(pairs):>4}" + "".join(f"{c:>24}" for c in cells))


def summarise(results, names, reps, duration, connections):
    """The medians table, the load core's side, then the same-repetition
    ratios (and, where the cores moved between placements during the run,
    those of the repetitions with the same placement)."""
    moved = placements(results)
    # The fields every run of a configuration has (a log can join runs of
    # older and newer formats), numbers only.
    med = {k: {f: statistics.median(x[f] for x in v)
               for f in set.intersection(*(set(x) for x in v)) - {"placement"}} for k, v in results.items()}
    print()
    print(f"Medians over {reps} repetitions, {duration}s each, {connections} connections, "
          f"proxy on core {PROXY_CORE}, wrk and backends on core {LOAD_CORE}")
    print(f"{'proxy':<10}{'ids in':<8}{'req/s':>10}{'p50 us':>9}{'p99 us':>9}{'cpu us/req':>12}{'usr':>6}{'sys':>6}{'rss MiB':>9}"
          f"{'errors':>8}{'rps/nginx':>11}{'cpu/nginx':>11}{'rps/direct':>12}")
    direct = med.get(("direct", "path"))
    for (name, mode), m in rows_with(med, names):
        ng = med.get(("nginx", mode))
        rps_ng = f"{m['rps'] / ng['rps']:.2f}" if ng and name != "direct" else "-"
        cpu_ng = f"{m['cpu_us_per_req'] / ng['cpu_us_per_req']:.2f}" if ng and ng["cpu_us_per_req"] and name != "direct" else "-"
        rps_d = f"{m['rps'] / direct['rps']:.2f}" if direct else "-"
        print(f"{name:<10}{mode:<8}{m['rps']:>10.0f}{m['p50_us']:>9.0f}{m['p99_us']:>9.0f}{m['cpu_us_per_req']:>12.2f}"
              f"{m['usr_us_per_req']:>6.1f}{m['sys_us_per_req']:>6.1f}{m['rss_mib']:>9.1f}{m['errors']:>8.0f}{rps_ng:>11}{cpu_ng:>11}{rps_d:>12}")
    load_core(med, names, results)
    spread(med, names, results, connections)
    paired(results, names)
    if moved:
        paired(results, names, same_placement=True)
    paired_interval(results, names)
    verdict(results)
    if results.get(("baseline", "path")) or results.get(("baseline", "header")):
        verdict(results, "baseline")


# The goals for proxy `shardgate`, judged by the medians of one run: the
# figure, how it must compare, and with which proxies.
GOALS = (("cpu_us_per_req", "cpu us/req", "below", ("nginx", "haproxy")),
         ("rps", "req/s", "above", ("nginx", "haproxy")),
         ("p99_us", "p99 us", "at most", ("nginx",)),
         ("rss_mib", "rss MiB", "at most", ("nginx",)))
COMPARE = {"below": lambda a, b: a < b, "above": lambda a, b: a > b, "at most": lambda a, b: a <= b}
REDRAWS = 2000
INTERVAL_REDRAWS = 20000


def verdict(results, proxy="shardgate"):
    """Each goal by this run's medians, met or not, and the share of redraws
    of the run in which it holds: how firm its margin is. A redraw takes as
    many repetitions again, with replacement, a whole repetition at a time
    (every proxy's runs of one repetition were minutes apart, in one state
    of the host), and takes the medians again. On a shared host the same
    binary's p99 moves between runs by more than the margins between
    proxies, and a margin that holds in few redraws may not hold in a rerun.
    Only repetitions that measured the proxy and every proxy it is compared
    with count. Seeded, so that `--from-log` prints the same shares."""
    modes = [m for m in ("path", "header") if results.get((proxy, m))]
    goals, unjudged = [], []
    for mode in modes:
        for field, label, how, every_ref in GOALS:
            refs = tuple(r for r in every_ref if results.get((r, mode)))
            if refs:
                goals.append((mode, (field, label, how, refs)))
            if refs != every_ref:
                unjudged.append(f"{mode} {label} against {', '.join(r for r in every_ref if r not in refs)}")
    if not goals:
        return
    at = {(name, mode): by_repetition(results[(name, mode)])
          for mode, (_, _, _, refs) in goals for name in (proxy, *refs)}
    keys = sorted(set.intersection(*(set(v) for v in at.values())))
    if not keys:
        return
    dropped = max(len(results[(proxy, mode)]) for mode in modes) - len(keys)

    def median(name, mode, field, picks):
        return statistics.median(at[(name, mode)][k][field] for k in picks)

    def met(mode, goal, picks):
        field, _, how, refs = goal
        mine = median(proxy, mode, field, picks)
        return all(COMPARE[how](mine, median(ref, mode, field, picks)) for ref in refs)

    rng = random.Random(0)
    draws = [[keys[rng.randrange(len(keys))] for _ in keys] for _ in range(REDRAWS)]
    print()
    print(f"Goals for {proxy}, by the medians of its {len(keys)} repetitions, and the share of {REDRAWS} redraws "
          f"of them in which each holds")
    print(f"{'ids in':<8}{'goal':<36}{proxy:>10}{'nginx':>10}{'haproxy':>10}{'met':>6}{'holds in':>10}")
    # Each goal's outcome in each redraw, for its own share and for all of
    # them together.
    outcomes = [[met(mode, goal, d) for d in draws] for mode, goal in goals]
    for (mode, goal), held_in in zip(goals, outcomes):
        field, label, how, refs = goal
        values = [median(name, mode, field, keys) if (name, mode) in at else None
                  for name in (proxy, "nginx", "haproxy")]
        cells = "".join(f"{'-':>10}" if v is None else f"{v:>10.0f}" if v >= 1000 else f"{v:>10.1f}" for v in values)
        print(f"{mode:<8}{label + ' ' + how + ' ' + ' and '.join(refs):<36}{cells}"
              f"{'yes' if met(mode, goal, keys) else 'no':>6}{sum(held_in) / REDRAWS:>10.0%}")
    if unjudged:
        print(f"not judged (not measured in this run): {'; '.join(unjudged)}")
    if dropped > 0:
        print(f"left out: {dropped} repetitions of {proxy} without every proxy it is compared with")
    errors = sum(r["errors"] for mode in modes for r in results[(proxy, mode)])
    every_goal = errors == 0 and all(met(mode, goal, keys) for mode, goal in goals)
    held = sum(all(draw) for draw in zip(*outcomes)) / REDRAWS if errors == 0 else 0
    print(f"errors: {errors:.0f}; every goal {'judged ' if unjudged else ''}{'met' if every_goal else 'not met'} "
          f"by these medians, holds in {held:.0%} of redraws")


def rows_with(med, names, *fields):
    """The configurations whose medians have all `fields` (a log can join
    runs of older formats), in the tables' order: by proxy, then mode."""
    return sorted(((k, m) for k, m in med.items() if all(f in m for f in fields)),
                  key=lambda kv: (names.index(kv[0][0]), kv[0][1]))


def load_core(med, names, results):
    """The other side of each request: wrk's and the backends' CPU a request
    (both on the load core), each core's busy share, medians, and where the
    cores' placement was timed, the median round trip (before and after
    every run) and how many runs were near, far and mixed."""
    rows = rows_with(med, names, "wrk_us_per_req")
    if not rows:
        return
    print()
    print(f"The load core's side (core {LOAD_CORE}: wrk and backends), medians; the cores' placement")
    print(f"{'proxy':<10}{'ids in':<8}{'wrk us/req':>12}{'backend us/req':>16}{'load core busy':>16}{'proxy core busy':>17}"
          f"{'round trip ns':>15}{'near/far/mixed':>16}")
    for (name, mode), m in rows:
        runs = results[(name, mode)]
        # placements() marked every timed run `one`, or each near, far or mixed.
        kinds = [r["placement"] for r in runs if "placement" in r]
        placed = "-" if not kinds else "one" if kinds[0] == "one" else \
            "/".join(str(kinds.count(k)) for k in ("near", "far", "mixed"))
        pings = [r[k] for r in runs for k in ("ping_before_ns", "ping_after_ns") if r.get(k)]
        ping = f"{statistics.median(pings):.0f}" if pings else "-"
        print(f"{name:<10}{mode:<8}{m['wrk_us_per_req']:>12.2f}{m['backend_us_per_req']:>16.2f}"
              f"{m['load_core_pct']:>15.0f}%{m['proxy_core_pct']:>16.0f}%{ping:>15}{placed:>16}")


# A core this busy (share of the run) is taken to be the one that set the rate.
SATURATED_PCT = 97


def spread(med, names, results, connections):
    """wrk's latency distribution beside the core that was saturated. In a
    closed loop each connection's cycle, the connections over req/s, is a
    request's latency plus wrk's own time before it sends the next one; the
    p99 is that cycle times how far it sits above it (p99/cycle), and that
    depends on where the requests queue. Where the proxy's core is the
    saturated one they queue in one FIFO server, the proxy, and wait alike
    (a narrow spread; wrk's mean is the whole cycle); where the load core
    is, wrk and the backends take turns on it, each handling in a batch
    what piled up while the other ran, and a request's wait depends on
    where in the turns it falls (a wide spread; wrk's mean leaves out its
    own share of the cycle). Medians over the repetitions; the ratios are
    taken in each repetition."""
    rows = rows_with(med, names, "sd_us", "load_core_pct")
    if not rows:
        return

    def cycle_us(r):
        return connections * 1e6 / r["rps"]

    def per_run(runs, f):
        return statistics.median(f(r) for r in runs) if runs else float("nan")
    print()
    print(f"wrk's latency, medians; cycle = {connections} connections / req/s; the core at {SATURATED_PCT}% "
          "busy or more")
    print(f"{'proxy':<10}{'ids in':<8}{'p10 us':>8}{'p50 us':>8}{'p90 us':>8}{'p99 us':>8}{'mean us':>9}{'sd us':>7}"
          f"{'sd/mean':>9}{'mean/cycle':>12}{'p99/cycle':>11}{'saturated':>11}")
    for (name, mode), m in rows:
        busy = [core for core, pct in (("proxy", m["proxy_core_pct"]), ("load", m["load_core_pct"]))
                if pct >= SATURATED_PCT]
        runs = [r for r in results[(name, mode)] if "sd_us" in r and r["mean_us"] > 0 and r["rps"] > 0]
        sd_mean = per_run(runs, lambda r: r["sd_us"] / r["mean_us"])
        mean_cycle = per_run(runs, lambda r: r["mean_us"] / cycle_us(r))
        p99_cycle = per_run(runs, lambda r: r["p99_us"] / cycle_us(r))
        print(f"{name:<10}{mode:<8}{m['p10_us']:>8.0f}{m['p50_us']:>8.0f}{m['p90_us']:>8.0f}{m['p99_us']:>8.0f}"
              f"{m['mean_us']:>9.0f}{m['sd_us']:>7.0f}{sd_mean:>9.2f}{mean_cycle:>12.2f}{p99_cycle:>11.2f}"
              f"{'+'.join(busy) or '-':>11}")

if __name__ == "__main__":
    main()
