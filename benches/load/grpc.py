#!/usr/bin/env python3
"""gRPC unary calls routed by the id in their metadata: shardgate against
nginx's grpc_pass and HAProxy routing the same calls, and shardgate routing
by a field of the message instead. CPU a call of the proxy process and
calls a second.

Workload: h2load (Debian's nghttp2-client) sends unary calls over HTTP/2
with prior knowledge, C connections with M streams each, every call a
1 KiB message (`/bench.Echo/Call`, `x-entity-id: <iUID>`); the backend is
benches/grpc_backend.rs (hyper, one message and `grpc-status: 0` in
trailers). nginx and HAProxy route with a regex on the iUID's country
digits in the metadata (the only way they can); shardgate decodes it. In
`shardgate+field` the id is field 1 of the message instead, read without a
schema (`id: { grpc_field: "1" }`), and the metadata carries none. Proxy on
core 1, h2load and the backend on core 0; each configuration runs once per
repetition, in turn, and the table shows medians and the same-repetition
ratios to nginx.

    benches/load/grpc.py [--reps 7] [--calls 200000] [--connections 16] [--streams 10] [--shardgate BINARY]
                         [--baseline OLD_BINARY] [--same-fields]
    benches/load/grpc.py --instructions [--calls 20000] [--shardgate BINARY] [--same-fields]
    benches/load/grpc.py --syscalls [--calls 100000] [--shardgate BINARY] [--baseline OLD_BINARY]

--baseline runs an older shardgate binary too (routed by metadata) in
every repetition, and prints the same-repetition ratios of the two.

--same-fields has nginx and HAProxy add the fields shardgate adds to each
call and answer (X-Forwarded-For/Proto/Host, a request id, Via), so that
the three hand the backend and h2load the same work.

--instructions counts user-space instructions a call under callgrind
instead: shardgate's (routed by metadata, then by the message field, the
steady figure for what the field costs) and HAProxy's (by metadata), the
steady figure against it.

--syscalls counts, once per proxy (HAProxy, shardgate, the baseline), the
proxy's socket system calls a call with `perf stat` on the syscall
tracepoints (Debian's linux-perf, run as root), beside its user and
system CPU a call: the steady figure for what the kernel side costs.
"""
import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare as c  # noqa: E402
import instructions as ins  # noqa: E402

H2LOAD = "/usr/bin/h2load"
PORTS = {"eu": 19201, "kz": 19202, "us": 19203}
PROXY_PORT = 19200
SIZE = 1024


def backend_binary():
    subprocess.run(["cargo", "build", "--release", "--quiet", "--bench", "grpc_backend"], cwd=c.ROOT, check=True)
    deps = os.path.join(c.ROOT, "target", "release", "deps")
    found = [os.path.join(deps, f) for f in os.listdir(deps) if f.startswith("grpc_backend-") and not f.endswith(".d")]
    return max(found, key=os.path.getmtime)


def regex(country):
    return f"^{c.ID_RE}{country:02x}-"


# With --same-fields, nginx and HAProxy add to each call and answer the fields
# shardgate adds (X-Forwarded-*, a request id, Via), as compare.py's option
# does for HTTP/1.1; without it they add nothing, as a bare configuration does.
NGINX_SAME_FIELDS = """
      grpc_set_header X-Forwarded-For $proxy_add_x_forwarded_for; grpc_set_header X-Forwarded-Proto $scheme;
      grpc_set_header X-Forwarded-Host $http_host; grpc_set_header X-Request-Id $request_id;
      grpc_set_header Via "2 nginx"; add_header X-Request-Id $request_id; add_header Via "2 nginx";"""
HAPROXY_SAME_FIELDS = c.HAPROXY_SAME_FIELDS.replace('"1.1 haproxy"', '"2 haproxy"')


def nginx_conf(tmp, same_fields=False):
    ups = "\n".join(f"  upstream {r} {{ server 127.0.0.1:{p}; keepalive 64; }}" for r, p in PORTS.items())
    hdr = "\n".join(f'    "~{regex(cc)}" {r};' for r, cc in c.REGIONS.items())
    return f"""daemon off; worker_processes 1; pid {tmp}/nginx.pid; error_log {tmp}/nginx.err;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  http2_max_concurrent_streams 1024;
{ups}
  map $http_x_entity_id $owner {{
    default "";
{hdr}
  }}
  server {{
    listen 127.0.0.1:{PROXY_PORT} http2 backlog=4096;
    keepalive_requests 1000000;
    location / {{
      if ($owner = "") {{ return 400; }}
      grpc_pass grpc://$owner;{NGINX_SAME_FIELDS if same_fields else ""}
    }}
  }}
}}
"""


def haproxy_conf(same_fields=False):
    acls = []
    for r, cc in c.REGIONS.items():
        acls.append(f"  acl h_{r} req.hdr(x-entity-id) -m reg {regex(cc)}")
        acls.append(f"  use_backend {r} if h_{r}")
    backends = "\n".join(
        f"backend {r}\n  http-reuse always\n  server s1 127.0.0.1:{p} proto h2 maxconn 1000" for r, p in PORTS.items())
    return f"""global
  nbthread 1
  maxconn 4000
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
frontend fe
  bind 127.0.0.1:{PROXY_PORT} proto h2
{HAPROXY_SAME_FIELDS if same_fields else ""}{chr(10).join(acls)}
  default_backend none
backend none
  http-request deny deny_status 400
{backends}
"""


GRPC_ROUTES = """  - name: by-metadata
    match: { path: "/bench.Echo/{method}" }
    id: { metadata: x-entity-id, formats: [iuid] }
  - name: by-field
    match: { path: "/field.Echo/{method}" }
    id: { grpc_field: "1", formats: [iuid] }
"""


def shardgate_conf():
    return c.shardgate_conf(PORTS, "h2c", PROXY_PORT, GRPC_ROUTES)


def message(entity):
    """A 1 KiB protobuf message: field 1 the id, field 2 padding; with its gRPC prefix."""
    text = entity.encode()
    body = bytes([0x0A, len(text)]) + text
    pad = SIZE - len(body) - 3
    body += bytes([0x12, pad & 0x7F | 0x80, pad >> 7]) + b"x" * pad
    return b"\x00" + len(body).to_bytes(4, "big") + body


def h2load(args, data, path, metadata):
    cmd = [H2LOAD, "-n", str(args.calls), "-c", str(args.connections), "-m", str(args.streams), "-d", data,
           "-H", "content-type: application/grpc", "-H", "te: trailers"]
    if metadata:
        cmd += ["-H", f"x-entity-id: {metadata}"]
    out = subprocess.run(["taskset", "-c", c.LOAD_CORE, *cmd, f"http://127.0.0.1:{PROXY_PORT}{path}"],
                         capture_output=True, text=True, timeout=600).stdout
    done = re.search(r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored", out)
    took = re.search(r"finished in ([\d.]+)(m?s)", out)
    status = re.search(r"status codes: (\d+) 2xx", out)
    if not (done and took and status):
        raise RuntimeError(f"h2load said:\n{out}")
    seconds = float(took.group(1)) / (1000 if took.group(2) == "ms" else 1)
    return int(status.group(1)), int(done.group(3)) + int(done.group(4)), seconds


CHECK = """
import sys, grpc
path, md, data = sys.argv[1], sys.argv[2], open(sys.argv[3], "rb").read()[5:]
meta = (("x-entity-id", md),) if md else ()
with grpc.insecure_channel("127.0.0.1:%d") as ch:
    print(ch.unary_unary(path)(data, metadata=meta, timeout=10).decode())
""" % PROXY_PORT


def check(path, data, md):
    """One call through the proxy with Python's grpcio: the region that answered (a gRPC
    error the proxy made is a 200 too, so h2load's status codes cannot tell)."""
    # -P: not this directory first on the path (its grpc.py would shadow grpcio).
    out = subprocess.run(["/usr/bin/python3", "-P", "-c", CHECK, path, md or "", data], capture_output=True, text=True,
                         timeout=30)
    return out.stdout.strip() or out.stderr.strip().splitlines()[-1:]


SYSCALLS = ["writev", "sendto", "write", "recvfrom", "read", "epoll_wait"]


def counted(pids, tmp, measure):
    """`measure()` with perf stat counting the syscalls of `pids`: its result and {syscall: count}."""
    out = os.path.join(tmp, "perf.txt")
    events = ",".join(f"syscalls:sys_enter_{n}" for n in SYSCALLS)
    perf = subprocess.Popen(["perf", "stat", "-x", ",", "-o", out, "-e", events, "-p", ",".join(map(str, pids))])
    time.sleep(0.5)
    try:
        result = measure()
    finally:
        perf.send_signal(signal.SIGINT)
        perf.wait(30)
    counts = {}
    with open(out) as f:
        for line in f:
            cols = line.split(",")
            if len(cols) > 2 and cols[0].strip().isdigit():
                counts[cols[2].rsplit("sys_enter_", 1)[-1]] = int(cols[0])
    return result, counts


def run_one(name, args, tmp, data_md, data_field, entity, shardgate, syscalls=False):
    if name == "nginx":
        conf = os.path.join(tmp, "nginx.conf")
        with open(conf, "w") as f:
            f.write(nginx_conf(tmp, args.same_fields))
        proc = c.start([c.NGINX, "-c", conf, "-p", tmp], c.PROXY_CORE)
    elif name == "haproxy":
        conf = os.path.join(tmp, "haproxy.cfg")
        with open(conf, "w") as f:
            f.write(haproxy_conf(args.same_fields))
        proc = c.start([c.HAPROXY, "-f", conf, "-db"], c.PROXY_CORE)
    else:
        conf = os.path.join(tmp, "shardgate.yaml")
        with open(conf, "w") as f:
            f.write(shardgate_conf())
        # One runtime thread, as compare.py runs it (and as one nginx worker, one HAProxy thread).
        proc = c.start([shardgate, "--threads", "1", "serve", "-c", conf], c.PROXY_CORE)
    try:
        c.wait_port(PROXY_PORT, proc, timeout=20)
        time.sleep(0.3)
        field = name == "shardgate+field"
        path, data, md = ("/field.Echo/Call", data_field, None) if field else ("/bench.Echo/Call", data_md, entity)
        answered = check(path, data, md)
        if answered != "kz":
            raise RuntimeError(f"{name}: a call for kz was answered {answered!r}")
        pids = c.pids_of(proc)

        def measure():
            before = c.cpu_ticks(pids)
            ok, failed, seconds = h2load(args, data, path, md)
            return ok, failed, seconds, before, c.cpu_ticks(pids)

        if syscalls:
            (ok, failed, seconds, before, after), counts = counted(pids, tmp, measure)
        else:
            (ok, failed, seconds, before, after), counts = measure(), {}
    finally:
        c.stop(proc)
        while not c.free(PROXY_PORT):
            time.sleep(0.05)
    per_call = 1e6 / c.CLK_TCK / max(ok, 1)
    usr, sys_ = (after[0] - before[0]) * per_call, (after[1] - before[1]) * per_call
    return {"ok": ok, "failed": failed, "calls_s": ok / seconds, "cpu_us": usr + sys_, "usr_us": usr,
            "sys_us": sys_, "syscalls": {n: v / max(ok, 1) for n, v in counts.items()}}


def syscalls(args, tmp, data_md, data_field, entity):
    """Each proxy once, routed by metadata, its syscalls a call counted."""
    names = ["haproxy", "shardgate"] + (["baseline"] if args.baseline else [])
    print(f"{'proxy':10} {'calls/s':>8} {'user us':>8} {'sys us':>7}  " + " ".join(f"{n:>10}" for n in SYSCALLS)
          + "   (system calls a call)")
    for n in names:
        binary = args.baseline if n == "baseline" else args.shardgate
        r = run_one("shardgate" if n == "baseline" else n, args, tmp, data_md, data_field, entity, binary, True)
        if r["failed"]:
            sys.exit(f"{n}: {r['failed']} calls failed")
        print(f"{n:10} {r['calls_s']:8.0f} {r['usr_us']:8.2f} {r['sys_us']:7.2f}  "
              + " ".join(f"{r['syscalls'].get(s, 0):10.3f}" for s in SYSCALLS), flush=True)


def instructions(args, tmp, data_md, data_field, entity):
    """Instructions a call under callgrind: shardgate by metadata and by field,
    then HAProxy routing by metadata (with --same-fields, adding shardgate's
    fields), the steady figure beside the load run's CPU."""
    conf = os.path.join(tmp, "shardgate.yaml")
    with open(conf, "w") as f:
        f.write(shardgate_conf())
    hconf = os.path.join(tmp, "haproxy.cfg")
    with open(hconf, "w") as f:
        f.write(haproxy_conf(args.same_fields))
    own = [args.shardgate, "--threads", "1", "serve", "-c", conf]
    counted = {}
    for name, command, path, data, md in [
            ("shardgate metadata", own, "/bench.Echo/Call", data_md, entity),
            ("shardgate field", own, "/field.Echo/Call", data_field, None),
            ("haproxy metadata", [c.HAPROXY, "-f", hconf, "-db"], "/bench.Echo/Call", data_md, entity)]:
        out = os.path.join(tmp, "callgrind." + name.replace(" ", "."))
        proc = c.start(["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
                        *command], c.PROXY_CORE)
        try:
            c.wait_port(PROXY_PORT, proc, timeout=120)
            answered = check(path, data, md)
            if answered != "kz":
                raise RuntimeError(f"{name}: a call for kz was answered by {answered!r}")
            ins.callgrind_control("-i", "on", proc.pid)
            ok, failed, _ = h2load(args, data, path, md)
        finally:
            proc.send_signal(15)
            proc.wait(120)
        _, totals = ins.read_totals(out)
        if not totals or failed:
            raise RuntimeError(f"{name}: no instruction total, or {failed} calls failed ({out})")
        counted[name] = totals[0] / ok
        print(f"{name:18}  calls {ok}  instructions/call {counted[name]:.0f}  ({out})", flush=True)
    print(f"the message field costs {counted['shardgate field'] - counted['shardgate metadata']:+.0f} "
          f"instructions a call; shardgate / HAProxy, by metadata: "
          f"{counted['shardgate metadata'] / counted['haproxy metadata']:.2f}"
          + (" (HAProxy adding shardgate's fields)" if args.same_fields else ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--calls", type=int, default=200000)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--streams", type=int, default=10)
    ap.add_argument("--shardgate", default=c.SHARDGATE)
    ap.add_argument("--baseline", help="an older shardgate binary, measured in the same run")
    ap.add_argument("--instructions", action="store_true")
    ap.add_argument("--syscalls", action="store_true")
    ap.add_argument("--same-fields", action="store_true",
                    help="nginx and HAProxy add the fields shardgate adds (as compare.py's --same-fields)")
    args = ap.parse_args()
    if args.syscalls and not shutil.which("perf"):
        sys.exit("--syscalls needs perf (apt-get install linux-perf)")
    tmp = tempfile.mkdtemp(prefix="shardgate-grpc-")
    backend = c.start([backend_binary(), *[f"{r}={p}" for r, p in PORTS.items()]], c.LOAD_CORE)
    try:
        for p in PORTS.values():
            c.wait_port(p, backend)
        entity = c.mint_ids(1, args.shardgate)["kz"][0]
        data_md, data_field = os.path.join(tmp, "md.bin"), os.path.join(tmp, "field.bin")
        other = c.mint_ids(1, args.shardgate)["eu"][0]
        # The metadata mode's message holds another id: only the metadata routes it.
        with open(data_md, "w+b") as f:
            f.write(message(other))
        with open(data_field, "w+b") as f:
            f.write(message(entity))
        if args.instructions:
            instructions(args, tmp, data_md, data_field, entity)
            return
        if args.syscalls:
            syscalls(args, tmp, data_md, data_field, entity)
            return
        names = ["nginx", "haproxy", "shardgate", "shardgate+field"] + (["baseline"] if args.baseline else [])
        runs = {n: [] for n in names}
        for rep in range(args.reps):
            for n in names:
                binary = args.baseline if n == "baseline" else args.shardgate
                r = run_one("shardgate" if n == "baseline" else n, args, tmp, data_md, data_field, entity, binary)
                runs[n].append(r)
                print(f"rep {rep + 1} {n:16} calls/s {r['calls_s']:9.0f}  cpu/call {r['cpu_us']:6.2f} us  "
                      f"2xx {r['ok']} failed {r['failed']}", flush=True)
    finally:
        c.stop(backend)
    print(f"\n{args.reps} repetitions, {args.calls} unary calls each, {args.connections} connections x "
          f"{args.streams} streams, {SIZE}-byte messages"
          + ("; nginx and HAProxy add shardgate's fields" if args.same_fields else ""))
    print(f"{'proxy':16} {'calls/s':>9} {'CPU us/call':>12} {'CPU vs nginx':>13} {'calls/s vs nginx':>17} "
          f"{'CPU vs haproxy':>15} {'calls/s vs haproxy':>19}")
    for n in names:
        med = lambda f: statistics.median(r[f] for r in runs[n])
        ratio = lambda f, base: statistics.median(a[f] / b[f] for a, b in zip(runs[n], runs[base]))
        print(f"{n:16} {med('calls_s'):9.0f} {med('cpu_us'):12.2f} {ratio('cpu_us', 'nginx'):13.2f} "
              f"{ratio('calls_s', 'nginx'):17.2f} {ratio('cpu_us', 'haproxy'):15.2f} {ratio('calls_s', 'haproxy'):19.2f}")
    if args.baseline:
        for f in ("cpu_us", "calls_s"):
            r = [a[f] / b[f] for a, b in zip(runs["shardgate"], runs["baseline"])]
            print(f"shardgate / baseline, {f}: {statistics.median(r):.3f} (same-repetition ratios "
                  f"{min(r):.3f} to {max(r):.3f})")
    extra = [f["cpu_us"] - m["cpu_us"] for f, m in zip(runs["shardgate+field"], runs["shardgate"])]
    print(f"\nrouting by the message field instead of metadata: {statistics.median(extra):+.2f} us CPU a call "
          f"(median of same-repetition differences; range {min(extra):+.2f} to {max(extra):+.2f})")
    if any(r["failed"] for rs in runs.values() for r in rs):
        sys.exit("some calls failed")


if __name__ == "__main__":
    main()
