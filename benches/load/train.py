#!/usr/bin/env python3
"""Training run for profile-guided optimisation.

Runs compare.py's routed workload (the same backends, table and wrk scripts:
ids in the path, then in the X-Entity-Id header, 64 connections) through one
shardgate binary built with `-C profile-generate`, then stops it with SIGTERM
so that it drains, exits and writes its raw profile. scripts/pgo-refresh.sh
builds that binary, calls this and merges the profile.

    benches/load/train.py [--seconds 5] BINARY

Needs nginx and wrk (benches/load/run installs them). Loopback only.
"""
import argparse
import signal
import sys

import compare as c


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("binary")
    args = ap.parse_args()
    tmp, backend, ids, config = c.one_proxy_workload("shardgate-train-", args.binary)
    try:
        proxy = c.start([args.binary, "--threads", "1", "serve", "--config", config], c.PROXY_CORE)
        try:
            c.wait_port(c.PROXY_PORT, proxy, timeout=60)
            for mode in ("path", "header"):
                c.check_routing(c.PROXY_PORT, ids, mode)
                r = c.run_wrk(c.PROXY_PORT, c.lua_script(tmp, ids, mode), args.seconds, 64)
                if r["requests"] == 0 or r["errors"]:
                    sys.exit(f"train: {mode}: {r['requests']} requests, {r['errors']} errors")
                print(f"train: {mode}: {r['requests']} requests", flush=True)
        finally:
            proxy.send_signal(signal.SIGTERM)
            code = proxy.wait(60)
        if code != 0:
            sys.exit(f"train: the proxy exited with {code}; its profile may be incomplete")
    finally:
        c.stop(backend)


if __name__ == "__main__":
    main()
