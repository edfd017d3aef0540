#!/usr/bin/env python3
"""The cost of a fan-out: shardgate's CPU per fan-out request against three
plain routed requests, in one run.

Backends (nginx, core 0) answer GET /v1/orders/{iUID} with a short text and
GET /v1/users/{user}/orders with a JSON array of ITEMS orders of their region
(about 120 bytes each, iUIDs minted in the region's country). shardgate (core
1) routes the first and fans the second out to all three regions, merging
the arrays newest first (a page of 50). wrk (core 0) drives each workload in
turn, alternating, REPS times; the table shows medians and the ratio of one
fan-out's CPU to three routed requests'. With --baseline, each repetition
runs the old binary and then the new one, and the same-repetition ratios
of the two are printed too.

With --instructions, each given shardgate binary serves each workload under
`valgrind --tool=callgrind` (counting from the first request of the run, for
--seconds on 16 connections) and the user-space instructions a request are
printed, with the fan-out's over three routed requests': the steady figure
beside the load run's CPU. The callgrind files stay in a temporary
directory printed with each row.

    python3 benches/load/fanout.py [--duration 10] [--reps 3] [--items 20] [--binary BIN] [--baseline OLD]
    python3 benches/load/fanout.py --instructions BIN... [--seconds 15] [--items 20]
"""
import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare as c  # noqa: E402


def orders_json(region, ids):
    items = [f'{{"id":"{i}","region":"{region}","user":"alice","total_cents":{1000 + k},"status":"delivered"}}'
             for k, i in enumerate(ids)]
    return "[" + ",".join(items) + "]"


def backend_conf(tmp, ids, items):
    servers = []
    for region, port in c.BACKEND_PORTS.items():
        body = orders_json(region, ids[region][:items])
        servers.append(
            f"  server {{ listen 127.0.0.1:{port} backlog=4096; keepalive_requests 1000000;\n"
            f"    location /v1/users/ {{ default_type application/json; return 200 '{body}'; }}\n"
            f"    location / {{ add_header X-Backend-Region {region}; return 200 '{region}\\n'; }} }}")
    return (f"daemon off; master_process off; worker_processes 1; pid {tmp}/backend.pid; "
            f"error_log {tmp}/backend.err;\nevents {{ worker_connections 4096; }}\n"
            f"http {{ access_log off; {chr(10).join(servers)} }}\n")


def shardgate_conf():
    return c.shardgate_conf() + """  - name: user-orders
    match: { path: "/v1/users/{user}/orders" }
    fanout: { sort: { formats: [iuid] }, limit: { default: 50, max: 1000 } }
"""


def fanout_script(tmp):
    path = os.path.join(tmp, "wrk-fanout.lua")
    with open(path, "w") as f:
        f.write('request = function() return wrk.format("GET", "/v1/users/alice/orders") end\n')
        f.write(c.WRK_DONE)
    return path


def check(ids, items):
    """The proxy on PROXY_PORT routes and fans out as the workloads expect."""
    c.check_routing(c.PROXY_PORT, ids, "path")
    out = subprocess.run(["curl", "-s", f"http://127.0.0.1:{c.PROXY_PORT}/v1/users/alice/orders"],
                         capture_output=True, text=True, check=True).stdout
    if out.count('"region"') != min(50, 3 * items) + 3 or '"failed":[]' not in out:
        raise RuntimeError(f"fan-out check failed: {out[:300]}")


def load(args, tmp, ids, config):
    """The load run: each workload in turn, `args.reps` times, with each
    binary (the baseline first) in every repetition; medians."""
    binaries = ([("baseline", args.baseline)] if args.baseline else []) + [("shardgate", args.binary)]
    scripts = {"routed": c.lua_script(tmp, ids, "path"), "fanout": fanout_script(tmp)}
    results = {label: {} for label, _ in binaries}
    for rep in range(args.reps):
        for label, binary in binaries:
            proxy = c.start([binary, "serve", "-c", config], c.PROXY_CORE)
            try:
                c.wait_port(c.PROXY_PORT, proxy)
                check(ids, args.items)
                pids, backend_pids = c.pids_of(proxy), c.pids_of(args.backend_proc)
                for name, script in scripts.items():
                    r = c.measure("shardgate", c.PROXY_PORT, pids, backend_pids, script, args.duration,
                                  args.connections)
                    if r["errors"]:
                        raise RuntimeError(f"{label} {name}: {r['errors']} errors")
                    results[label].setdefault(name, []).append(r)
                    print(f"rep {rep + 1} {label:<9} {name:<7} {r['rps']:>9.0f} req/s  p99 {r['p99_us']:>6} us  "
                          f"cpu {r['cpu_us_per_req']:.2f} us/req ({r['usr_us_per_req']:.2f}+{r['sys_us_per_req']:.2f})",
                          flush=True)
            finally:
                c.stop(proxy)
    print(f"\nmedians of {args.reps}, {args.duration} s each, {args.connections} connections, "
          f"{args.items} orders per region")
    print(f"{'binary':<10}{'workload':<10}{'req/s':>10}{'p99 us':>9}{'CPU us/req':>12}{'usr':>7}{'sys':>7}")
    ratios = {}
    for label, per in results.items():
        for n, rs in per.items():
            m = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
            print(f"{label:<10}{n:<10}{m['rps']:>10.0f}{m['p99_us']:>9.0f}{m['cpu_us_per_req']:>12.2f}"
                  f"{m['usr_us_per_req']:>7.2f}{m['sys_us_per_req']:>7.2f}")
        # One fan-out's CPU over three routed requests', in each repetition.
        ratios[label] = [f["cpu_us_per_req"] / (3 * r["cpu_us_per_req"]) for f, r in zip(per["fanout"], per["routed"])]
    print()
    for label, rs in ratios.items():
        print(f"{label}: one fan-out (3 legs + merge) / three routed requests, CPU: median {statistics.median(rs):.2f}x "
              f"(repetitions {min(rs):.2f}-{max(rs):.2f})")
    if args.baseline:
        same = [n / b for n, b in zip(ratios["shardgate"], ratios["baseline"])]
        fan = [n["cpu_us_per_req"] / b["cpu_us_per_req"]
               for n, b in zip(results["shardgate"]["fanout"], results["baseline"]["fanout"])]
        print(f"shardgate / baseline, same repetition: fan-out CPU {statistics.median(fan):.3f}x, "
              f"the ratio {statistics.median(same):.3f}x")


def instructions(args, tmp, ids, config):
    """Each binary's user-space instructions a request in each workload (callgrind)."""
    import instructions as ins
    scripts = {"routed": c.lua_script(tmp, ids, "path"), "fanout": fanout_script(tmp)}
    for i, binary in enumerate(args.instructions):
        per = {}
        for name, script in scripts.items():
            out = os.path.join(tmp, f"callgrind.{i}.{name}")
            proxy = c.start(["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
                             binary, "--threads", "1", "serve", "-c", config], c.PROXY_CORE)
            try:
                c.wait_port(c.PROXY_PORT, proxy, timeout=120)
                check(ids, args.items)
                ins.callgrind_control("-i", "on", proxy.pid)
                r = c.run_wrk(c.PROXY_PORT, script, args.seconds, 16)
            finally:
                proxy.send_signal(signal.SIGTERM)
                proxy.wait(120)
            _, totals = ins.read_totals(out)
            if not totals or not r["requests"] or r["errors"]:
                raise RuntimeError(f"{binary} {name}: no instruction total, no requests or errors ({out})")
            per[name] = totals[0] / r["requests"]
            print(f"{binary}  {name}  requests {r['requests']}  instructions/request {per[name]:.0f}  ({out})",
                  flush=True)
        print(f"{binary}  one fan-out / three routed requests, instructions: "
              f"{per['fanout'] / (3 * per['routed']):.2f}x", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--items", type=int, default=20, help="orders per region in each fan-out answer")
    ap.add_argument("--binary", default=c.SHARDGATE, help="the shardgate binary of the load run")
    ap.add_argument("--baseline", metavar="OLD", help="also run this binary in every repetition, first")
    ap.add_argument("--instructions", nargs="+", metavar="BIN", help="count instructions of these binaries")
    ap.add_argument("--seconds", type=int, default=15, help="wrk's run under callgrind, each workload")
    args = ap.parse_args()
    ids = c.mint_ids(max(args.items, 1000), args.instructions[0] if args.instructions else args.binary)
    # Kept with --instructions, for callgrind_annotate.
    tmp = tempfile.mkdtemp(prefix="shardgate-fanout-")
    with open(f"{tmp}/backend.conf", "w") as f:
        f.write(backend_conf(tmp, ids, args.items))
    config = f"{tmp}/sg.yaml"
    with open(config, "w") as f:
        f.write(shardgate_conf())
    args.backend_proc = c.start([c.NGINX, "-c", f"{tmp}/backend.conf", "-p", tmp], c.LOAD_CORE)
    try:
        for port in c.BACKEND_PORTS.values():
            c.wait_port(port, args.backend_proc)
        if args.instructions:
            instructions(args, tmp, ids, config)
        else:
            load(args, tmp, ids, config)
    finally:
        c.stop(args.backend_proc)
        if not args.instructions:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
