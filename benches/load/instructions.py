#!/usr/bin/env python3
"""User-space instructions per proxied request, counted by callgrind.

CPU time on a shared VM moves by ±15% between runs; an instruction count
does not. This runs the workload of compare.py (the same backends, table and
wrk scripts) through each given shardgate binary under
`valgrind --tool=callgrind` and divides the instructions executed by the
requests served. Counting starts once the proxy is up and has routed the
check requests (`callgrind_control -i on`), so start-up (loading the system's
TLS roots, the table) does not weigh on a binary that served fewer requests.

    benches/load/instructions.py [--mode path,header,...] [--seconds 15] [--cache-sim] [--backend] BINARY...

BINARY is a shardgate binary, or `nginx` or `haproxy` for the two reference
proxies with compare.py's configurations (nginx without its master process,
so that one process serves and is counted); `nginx+fields` and
`haproxy+fields` are the same with compare.py's --same-fields (they add the
X-Forwarded-*, request id and Via fields shardgate adds).

With --cache-sim callgrind also simulates the caches and branch predictors
and every event is printed per request: Ir instructions, Dr/Dw data
reads/writes, I1mr/D1mr/D1mw L1 misses, ILmr/DLmr/DLmw last-level misses,
Bc/Bcm conditional branches and their mispredictions, Bi/Bim indirect ones
(a model of a generic CPU, not this one's counters, which this VM does not
expose).

With --backend the backends (one nginx process, the same for every proxy)
run under callgrind too, and each row also gives the backends' instructions
per request behind that proxy: the same work but for what the proxy sends
them (the fields it adds, its Host), so the difference between two rows is
what one proxy's requests cost a server more than the other's. Their files
are in a directory of their own, printed first.

Needs valgrind, nginx and wrk (benches/load/run installs the last two). The
callgrind files stay in a temporary directory printed with each row, for
callgrind_annotate.
"""
import argparse
import os
import signal
import subprocess
import tempfile

import compare as c

# The reference proxies, as BINARY names (proxy_command).
REFERENCE = ("nginx", "nginx+fields", "haproxy", "haproxy+fields")
MODES = ("path", "header", "pinned", "ruled", "fixed")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", default="path",
                    help="path, header, pinned, ruled or fixed, or several separated by commas (each binary "
                         "in each mode, one after another); pinned: a route without an id; ruled: the path "
                         "route with three header rules with the request's values; fixed: the same with "
                         "fixed values (these need a build that reads them)")
    ap.add_argument("--seconds", type=int, default=15)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--cache-sim", action="store_true")
    ap.add_argument("--backend", action="store_true", help="also count the backends' instructions a request")
    ap.add_argument("binaries", nargs="+")
    args = ap.parse_args()
    modes = args.mode.split(",")
    for mode in modes:
        if mode not in MODES:
            ap.error(f"unknown mode {mode!r}: {', '.join(MODES)}")
    # Ids are minted by the first shardgate binary given (or target/release's).
    minter = next((b for b in args.binaries if b not in REFERENCE), None)
    # With --backend, the backends count only while a proxy's wrk run lasts:
    # each dump (backend.1, backend.2, ...) holds one proxy's and resets.
    backend_out = tempfile.mkdtemp(prefix="shardgate-callgrind-backend-") + "/backend" if args.backend else None
    if backend_out:
        print(f"the backends' callgrind files: {backend_out}.1 for the first row, .2 for the second, ...", flush=True)
    wrap = ("valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={backend_out}") \
        if args.backend else ()
    front_door = any(m in ("pinned", "ruled", "fixed") for m in modes)
    tmp, backend, ids, config = c.one_proxy_workload("shardgate-callgrind-", minter, wrap, front_door)
    try:
        for k, mode in enumerate(modes):
            # The backends' dumps are numbered on across the modes.
            count(args, mode, tmp, backend, ids, config, backend_out, k * len(args.binaries))
    finally:
        c.stop(backend)


def count(args, mode, tmp, backend, ids, config, backend_out, dumps_before):
    """Every binary's instructions a request in one mode, one line each."""
    script = c.lua_script(tmp, ids, mode)
    sim = ["--cache-sim=yes", "--branch-sim=yes"] if args.cache_sim else []
    for i, binary in enumerate(args.binaries):
        out = os.path.join(tmp, f"callgrind.{i}.{mode}")
        command, stop = proxy_command(binary, tmp, config)
        proxy = c.start(["valgrind", "--tool=callgrind", "--instr-atstart=no", *sim,
                         f"--callgrind-out-file={out}", *command], c.PROXY_CORE)
        try:
            c.wait_port(c.PROXY_PORT, proxy, timeout=120)
            c.check_routing(c.PROXY_PORT, ids, mode)
            callgrind_control("-i", "on", proxy.pid)
            if args.backend:
                callgrind_control("-i", "on", backend.pid)
            r = c.run_wrk(c.PROXY_PORT, script, args.seconds, args.connections)
            if args.backend:
                # Dumped (which also zeroes the counts) while still
                # counting, then counting stops until the next proxy's
                # run: nothing between two runs is counted.
                callgrind_control("-d", backend.pid)
                callgrind_control("-i", "off", backend.pid)
        finally:
            proxy.send_signal(stop)
            proxy.wait(120)
        events, totals = read_totals(out)
        if not totals or not totals[0] or r["requests"] == 0:
            raise RuntimeError(f"{binary}: no instruction total or no requests ({out})")
        n = r["requests"]
        line = f"{binary}  {mode}  requests {n}  errors {r['errors']}  instructions/request {totals[0] / n:.0f}"
        if args.backend:
            dump = f"{backend_out}.{dumps_before + i + 1}"
            _, backend_totals = read_totals(dump)
            if not backend_totals:
                raise RuntimeError(f"{binary}: no backend total ({dump})")
            line += f"  backend instructions/request {backend_totals[0] / n:.0f}"
        if args.cache_sim:
            line += "  per request: " + "  ".join(f"{e} {t / n:.0f}" for e, t in zip(events, totals))
        print(f"{line}  ({out})", flush=True)


def callgrind_control(*args):
    """callgrind_control with these arguments (a pid last); fails loudly."""
    subprocess.run(["callgrind_control", *map(str, args)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)


def proxy_command(binary, tmp, config):
    """The command line that serves compare.py's workload, and its stop signal."""
    same_fields = binary.endswith("+fields")
    if binary in ("nginx", "nginx+fields"):
        conf = os.path.join(tmp, "nginx.conf")
        with open(conf, "w") as f:
            f.write(c.nginx_conf(tmp, same_fields).replace("daemon off;", "daemon off; master_process off;", 1))
        # SIGQUIT: nginx's graceful stop, which lets valgrind write its totals.
        return [c.NGINX, "-c", conf, "-p", tmp], signal.SIGQUIT
    if binary in ("haproxy", "haproxy+fields"):
        conf = os.path.join(tmp, "haproxy.cfg")
        with open(conf, "w") as f:
            f.write(c.haproxy_conf(tmp, same_fields))
        return [c.HAPROXY, "-f", conf, "-db"], signal.SIGTERM
    # One runtime thread, as compare.py runs it (and as one nginx worker).
    return [binary, "--threads", "1", "serve", "--config", config], signal.SIGTERM


def read_totals(path):
    """The event names and the totals from a callgrind file: its `totals:`
    line (the sum of the file's costs), or `summary:` where there is none.
    The `summary:` of a dump after instrumentation was switched off and on
    again can wrap around (valgrind 3.19); `totals:` stays right."""
    events, totals, summary = [], None, None
    with open(path) as f:
        for line in f:
            if line.startswith("events:"):
                events = line.split()[1:]
            elif line.startswith("totals:") and totals is None:
                totals = [int(x) for x in line.split()[1:]]
            elif line.startswith("summary:") and summary is None:
                summary = [int(x) for x in line.split()[1:]]
    return events, totals or summary


if __name__ == "__main__":
    main()
