#!/usr/bin/env python3
"""User-space instructions per proxied request, counted by callgrind.

CPU time on a shared VM moves by ±15% between runs; an instruction count
does not. This runs the workload of compare.py (the same backends, table and
wrk scripts) through each given shardgate binary under
`valgrind --tool=callgrind` and divides the instructions executed by the
requests served. Counting starts once the proxy is up and has routed the
check requests (`callgrind_control -i on`), so start-up (loading the system's
TLS roots, the table) does not weigh on a binary that served fewer requests.

    benches/load/instructions.py [--mode path|header] [--seconds 15] BINARY...

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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["path", "header"], default="path")
    ap.add_argument("--seconds", type=int, default=15)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("binaries", nargs="+")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="shardgate-callgrind-")
    with open(os.path.join(tmp, "backend.conf"), "w") as f:
        f.write(c.backend_conf(tmp))
    backend = c.start([c.NGINX, "-c", os.path.join(tmp, "backend.conf"), "-p", tmp], c.LOAD_CORE)
    try:
        for port in c.BACKEND_PORTS.values():
            c.wait_port(port, backend)
        ids = c.mint_ids(1000)
        config = os.path.join(tmp, "shardgate.yaml")
        with open(config, "w") as f:
            f.write(c.shardgate_conf())
        script = c.lua_script(tmp, ids, args.mode)
        for i, binary in enumerate(args.binaries):
            out = os.path.join(tmp, f"callgrind.{i}.{args.mode}")
            proxy = c.start(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                             f"--callgrind-out-file={out}", binary, "serve", "--config", config], c.PROXY_CORE)
            try:
                c.wait_port(c.PROXY_PORT, proxy, timeout=120)
                c.check_routing(c.PROXY_PORT, ids, args.mode)
                subprocess.run(["callgrind_control", "-i", "on", str(proxy.pid)], check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
                r = c.run_wrk(c.PROXY_PORT, script, args.seconds, args.connections)
            finally:
                proxy.send_signal(signal.SIGTERM)
                proxy.wait(120)
            total = 0
            with open(out) as f:
                for line in f:
                    if line.startswith(("totals:", "summary:")):
                        total = int(line.split()[1])
            if total == 0 or r["requests"] == 0:
                raise RuntimeError(f"{binary}: no instruction total or no requests ({out})")
            print(f"{binary}  {args.mode}  requests {r['requests']}  errors {r['errors']}  "
                  f"instructions/request {total / r['requests']:.0f}  ({out})", flush=True)
    finally:
        c.stop(backend)


if __name__ == "__main__":
    main()
