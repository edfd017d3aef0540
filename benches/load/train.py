#!/usr/bin/env python3
"""Training run for profile-guided optimisation.

Runs the load benchmarks' routed workloads through one shardgate binary
built with `-C profile-generate`, each phase on the same backends, table and
ids, then stops it with SIGTERM so that it drains, exits and writes its raw
profile:

* cleartext HTTP/1.1 (compare.py's workload: ids in the path, then in the
  X-Entity-Id header, 64 keep-alive connections);
* the front door over TLS 1.3 (tls.py's workload, the same table with a
  certificate): HTTPS/1.1 keep-alive with wrk, then HTTP/2 with h2load
  (16 connections x 10 streams), so that the code those run (rustls, the
  HTTP/2 server, its answer path) is laid out for them as well;
* gRPC unary calls (grpc.py's workload: cleartext HTTP/2, routed by
  metadata, then by a field of the message, to an HTTP/2 backend).

scripts/pgo-refresh.sh builds that binary, calls this and merges the
profile (the raw profiles of the three proxy processes together).

    benches/load/train.py [--seconds 5] BINARY

Needs nginx, wrk, h2load and openssl (benches/load/run installs them);
builds grpc.py's backend (`cargo build --release --bench grpc_backend`).
Loopback only.
"""
import argparse
import os
import signal
import sys

import compare as c
import grpc
import tls


def serve(binary, config, phases, port=c.PROXY_PORT):
    """Runs `phases` (callables of no argument) against one proxy serving
    `config` on `port`, then stops it so that it writes its profile."""
    proxy = c.start([binary, "--threads", "1", "serve", "--config", config], c.PROXY_CORE)
    try:
        c.wait_port(port, proxy, timeout=60)
        for phase in phases:
            phase()
    finally:
        proxy.send_signal(signal.SIGTERM)
        code = proxy.wait(60)
    if code != 0:
        sys.exit(f"train: the proxy exited with {code}; its profile may be incomplete")


def wrk(tmp, ids, mode, seconds, scheme="http"):
    """64 keep-alive connections for `seconds`, ids as `mode` places them."""
    name = mode if scheme == "http" else f"{scheme} {mode}"

    def phase():
        if scheme == "http":
            c.check_routing(c.PROXY_PORT, ids, mode)
        r = c.run_wrk(c.PROXY_PORT, c.lua_script(tmp, ids, mode), seconds, 64, scheme)
        if r["requests"] == 0 or r["errors"]:
            sys.exit(f"train: {name}: {r['requests']} requests, {r['errors']} errors")
        print(f"train: {name}: {r['requests']} requests", flush=True)
    return phase


def http2(tmp, ids, seconds):
    """tls.py's HTTP/2 workload (h2load, 16 connections x 10 streams)."""
    def phase():
        paths = [f"/v1/orders/{i}" for lst in ids.values() for i in lst]
        # No process's CPU is read: only the requests matter here.
        r = tls.h2([], tmp, paths, seconds)
        if r["rps"] == 0 or r["errors"]:
            sys.exit(f"train: http/2: {r['rps']:.0f} requests a second, {r['errors']} not answered 2xx")
        print(f"train: http/2: {r['rps'] * seconds:.0f} requests", flush=True)
    return phase


def unary(tmp, binary, seconds):
    """grpc.py's workload: unary calls over cleartext HTTP/2, routed by the
    id in their metadata, then by a field of the message, to its gRPC
    backend (the HTTP/2 upstream leg)."""
    backend = c.start([grpc.backend_binary(), *[f"{r}={p}" for r, p in grpc.PORTS.items()]], c.LOAD_CORE)
    try:
        for p in grpc.PORTS.values():
            c.wait_port(p, backend)
        entity, other = (c.mint_ids(1, binary)[r][0] for r in ("kz", "eu"))
        data_md, data_field = os.path.join(tmp, "md.bin"), os.path.join(tmp, "field.bin")
        with open(data_md, "wb") as f:
            f.write(grpc.message(other))
        with open(data_field, "wb") as f:
            f.write(grpc.message(entity))
        config = os.path.join(tmp, "shardgate-grpc.yaml")
        with open(config, "w") as f:
            f.write(grpc.shardgate_conf())
        load = argparse.Namespace(calls=seconds * 10000, connections=16, streams=10)

        def calls(path, data, md):
            def phase():
                ok, failed, _ = grpc.h2load(load, data, path, md)
                if ok == 0 or failed:
                    sys.exit(f"train: grpc {path}: {ok} calls answered, {failed} failed")
                print(f"train: grpc {path}: {ok} calls", flush=True)
            return phase

        serve(binary, config, [calls("/bench.Echo/Call", data_md, entity), calls("/field.Echo/Call", data_field, None)],
              grpc.PROXY_PORT)
    finally:
        c.stop(backend)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("binary")
    args = ap.parse_args()
    tmp, backend, ids, config = c.one_proxy_workload("shardgate-train-", args.binary)
    try:
        serve(args.binary, config, [wrk(tmp, ids, mode, args.seconds) for mode in ("path", "header")])
        cert, key, _ = tls.certificate(tmp)
        tls_config = os.path.join(tmp, "shardgate-tls.yaml")
        with open(tls_config, "w") as f:
            f.write(tls.shardgate_conf(cert, key))
        serve(args.binary, tls_config, [wrk(tmp, ids, "path", args.seconds, "https"), http2(tmp, ids, args.seconds)])
    finally:
        c.stop(backend)
    unary(tmp, args.binary, args.seconds)


if __name__ == "__main__":
    main()
