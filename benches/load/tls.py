#!/usr/bin/env python3
"""TLS on the front door: nginx, HAProxy and shardgate (and a baseline
build) terminating TLS 1.3 for the same routed workload, in one run.

Workloads, each proxy in turn, alternating, REPS times:

* keep-alive: HTTPS/1.1, wrk with 64 connections, GET /v1/orders/{iUID};
  CPU a request and req/s, as compare.py measures cleartext.
* h2: HTTP/2 over TLS, h2load with 16 connections of 10 streams each,
  the same paths; CPU a request and req/s.
* handshakes, at 64 and at 200 clients, each client in a loop: connect,
  handshake, one GET with `Connection: close`, read the answer, close.
  `full`: a new session every time (a client that keeps nothing), CPU a
  handshake; `resume`: each client offers the session (ticket or id) of
  its last connection, as browsers and TLS client libraries do, and the
  table shows the share of offered sessions the server resumed (a
  client's first connection offers none) and the CPU a handshake.

The clients are Python threads (the `ssl` module, OpenSSL) on the load
core; they, not the proxy, set the rate of handshakes, so the figures that
compare proxies are the proxy's CPU per handshake and the resumed share.
Every proxy gets the same ECDSA P-256 certificate, TLS 1.2 and 1.3, its
session cache and tickets on (nginx: a 10 MB shared cache and tickets;
HAProxy: its default 20,000-entry cache and tickets; shardgate: its
defaults), and one worker (nginx), thread (HAProxy) or runtime thread
(shardgate, `--threads 1`), on the proxy core.

    python3 benches/load/tls.py [--reps 7] [--duration 5] [--binary BIN] [--baseline OLD_BIN]
        [--only nginx,haproxy,shardgate] [--workloads keepalive,h2,...] [--same-fields]
    python3 benches/load/tls.py --instructions [--requests 20000] [--cache-sim] BIN...

--instructions counts each binary's user-space instructions a request
under callgrind instead (the steady figure): HTTP/2 over TLS with h2load
(16 connections x 10 streams), then HTTPS/1.1 keep-alive with wrk, the
handshakes of the connections included. A BIN of `nginx` or `haproxy` is
that proxy with this workload's configuration; --cache-sim adds callgrind's
cache and branch model (instruction-cache misses, mispredicted branches).
"""
import argparse
import os
import re
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare as c  # noqa: E402

PORT = c.PROXY_PORT
H2LOAD = shutil.which("h2load") or "/usr/bin/h2load"


def certificate(tmp):
    """A self-signed ECDSA P-256 certificate for 127.0.0.1; (cert, key, both in one file)."""
    cert, key, both = (os.path.join(tmp, n) for n in ("cert.pem", "key.pem", "both.pem"))
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", key, "-out", cert], check=True, capture_output=True)
    with open(both, "w") as f:
        f.write(open(cert).read() + open(key).read())
    return cert, key, both


def nginx_conf(tmp, cert, key, same_fields=False):
    conf = c.nginx_conf(tmp, same_fields)
    tls = (f"listen 127.0.0.1:{PORT} ssl http2 backlog=4096; ssl_certificate {cert}; ssl_certificate_key {key};\n"
           "    ssl_protocols TLSv1.2 TLSv1.3; ssl_session_cache shared:SSL:10m; ssl_session_tickets on;")
    return conf.replace(f"listen 127.0.0.1:{PORT} backlog=4096;", tls)


def haproxy_conf(tmp, both, same_fields=False):
    conf = c.haproxy_conf(tmp, same_fields)
    return conf.replace(f"  bind 127.0.0.1:{PORT}\n", f"  bind 127.0.0.1:{PORT} ssl crt {both} alpn h2,http/1.1\n")


def shardgate_conf(cert, key):
    conf = c.shardgate_conf()
    return conf.replace("log: { access: false }\n",
                        f'log: {{ access: false }}\nserver: {{ tls: {{ cert: "{cert}", key: "{key}" }} }}\n')


def client_context(cert):
    ctx = ssl.create_default_context(cafile=cert)
    ctx.check_hostname = False
    return ctx


def handshakes(ctx, paths, clients, duration, resume):
    """`clients` threads connecting for `duration` seconds; (handshakes, offered a session, resumed, errors)."""
    stop = time.monotonic() + duration
    counts = [[0, 0, 0, 0] for _ in range(clients)]

    def client(i):
        session = None
        n = 0
        while time.monotonic() < stop:
            path = paths[(i * 7919 + n) % len(paths)]
            n += 1
            try:
                with socket.create_connection(("127.0.0.1", PORT), timeout=5) as raw:
                    with ctx.wrap_socket(raw, server_hostname="127.0.0.1",
                                         session=session if resume else None) as s:
                        s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
                        answer = b""
                        while True:
                            chunk = s.recv(65536)
                            if not chunk:
                                break
                            answer += chunk
                        if not answer.startswith(b"HTTP/1.1 200"):
                            raise RuntimeError(answer[:80])
                        counts[i][0] += 1
                        counts[i][1] += resume and session is not None
                        counts[i][2] += s.session_reused
                        session = s.session
            except (OSError, RuntimeError, ssl.SSLError):
                counts[i][3] += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return tuple(sum(x[k] for x in counts) for k in range(4))


def measure_handshakes(pids, ctx, paths, clients, duration, resume):
    handshakes(ctx, paths, clients, 1, resume)  # warm-up; the sessions of this run's clients are new
    u0, s0 = c.cpu_ticks(pids)
    n, offered, resumed, errors = handshakes(ctx, paths, clients, duration, resume)
    u1, s1 = c.cpu_ticks(pids)
    cpu_s = ((u1 - u0) + (s1 - s0)) / c.CLK_TCK
    return {"per_s": n / duration, "resumed_pct": 100.0 * resumed / max(offered, 1), "errors": errors,
            "cpu_us": 1e6 * cpu_s / max(n, 1)}


def h2(pids, tmp, paths, duration):
    """h2load, 16 connections x 10 streams, for `duration` seconds after a one-second warm-up."""
    uris = os.path.join(tmp, "h2-uris.txt")
    with open(uris, "w") as f:
        f.write("".join(f"https://127.0.0.1:{PORT}{p}\n" for p in paths))
    u0, s0 = c.cpu_ticks(pids)
    out = subprocess.run(["taskset", "-c", c.LOAD_CORE, H2LOAD, "-c", "16", "-m", "10", "-t", "1", "-D",
                          str(duration), "--warm-up-time", "1", "-i", uris],
                         capture_output=True, text=True, timeout=duration + 30).stdout
    u1, s1 = c.cpu_ticks(pids)
    m = re.search(r"requests: (\d+) total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored",
                  out)
    status = re.search(r"status codes: (\d+) 2xx", out)
    if not m or not status:
        raise RuntimeError(f"h2load output not understood:\n{out}")
    done, ok2xx = int(m.group(2)), int(status.group(1))
    # CPU over the warm-up and the run, requests of the run only: the
    # warm-up's share is added back by the ratio of the times.
    scale = 1e6 / c.CLK_TCK * duration / (duration + 1) / max(done, 1)
    usr, sys_ = (u1 - u0) * scale, (s1 - s0) * scale
    return {"rps": done / duration, "cpu_us": usr + sys_, "usr_us": round(usr, 2), "sys_us": round(sys_, 2),
            "errors": done - ok2xx}


def keepalive(pids, script, duration):
    r = c.measure("x", PORT, pids, [], script, duration, 64, scheme="https")
    return {"rps": r["rps"], "cpu_us": r["cpu_us_per_req"], "errors": r["errors"]}


WORKLOADS = ["keepalive", "h2", "full-64", "resume-64", "full-200", "resume-200"]


def instructions(binaries, requests, cache_sim=False):
    """Instructions a request of each binary, HTTP/2 over TLS and HTTPS/1.1
    (callgrind); `nginx` and `haproxy` name the reference proxies, with this
    workload's TLS configuration. With `cache_sim`, callgrind's cache and
    branch model too, per request."""
    import instructions as ins
    tmp = tempfile.mkdtemp(prefix="shardgate-tls-callgrind-")
    cert, key, both = certificate(tmp)
    confs = {"nginx": nginx_conf(tmp, cert, key).replace("daemon off;", "daemon off; master_process off;", 1),
             "haproxy": haproxy_conf(tmp, both)}
    for name, text in confs.items():
        with open(os.path.join(tmp, f"{name}.conf"), "w") as f:
            f.write(text)
    # Each reference proxy's command, and the signal that stops it so that
    # valgrind writes its totals (SIGQUIT: nginx's graceful stop).
    references = {"nginx": ([c.NGINX, "-c", os.path.join(tmp, "nginx.conf"), "-p", tmp], signal.SIGQUIT),
                  "haproxy": ([c.HAPROXY, "-f", os.path.join(tmp, "haproxy.conf"), "-db"], signal.SIGTERM)}
    sim = ["--cache-sim=yes", "--branch-sim=yes"] if cache_sim else []
    with open(os.path.join(tmp, "backend.conf"), "w") as f:
        f.write(c.backend_conf(tmp))
    backend = c.start([c.NGINX, "-c", os.path.join(tmp, "backend.conf"), "-p", tmp], c.LOAD_CORE)
    try:
        for port in c.BACKEND_PORTS.values():
            c.wait_port(port, backend)
        ids = c.mint_ids(200, next((b for b in binaries if b not in references), None))
        paths = [f"/v1/orders/{i}" for lst in ids.values() for i in lst]
        uris = os.path.join(tmp, "h2-uris.txt")
        with open(uris, "w") as f:
            f.write("".join(f"https://127.0.0.1:{PORT}{p}\n" for p in paths))
        script = c.lua_script(tmp, ids, "path")
        conf = os.path.join(tmp, "shardgate.conf")
        with open(conf, "w") as f:
            f.write(shardgate_conf(cert, key))
        for workload in ("h2", "https/1.1"):
            for i, binary in enumerate(binaries):
                out = os.path.join(tmp, f"callgrind.{i}.{workload.replace('/', '')}")
                own = ([binary, "--threads", "1", "serve", "-c", conf], signal.SIGTERM)
                command, stop = references.get(binary, own)
                proxy = c.start(["valgrind", "--tool=callgrind", "--instr-atstart=no", *sim,
                                 f"--callgrind-out-file={out}", *command], c.PROXY_CORE)
                try:
                    c.wait_port(PORT, proxy, timeout=120)
                    ins.callgrind_control("-i", "on", proxy.pid)
                    if workload == "h2":
                        text = subprocess.run(["taskset", "-c", c.LOAD_CORE, H2LOAD, "-c", "16", "-m", "10", "-t",
                                               "1", "-n", str(requests), "-i", uris], capture_output=True,
                                              text=True, timeout=600).stdout
                        m = re.search(r"status codes: (\d+) 2xx", text)
                        n = int(m.group(1)) if m else 0
                    else:
                        n = c.run_wrk(PORT, script, 15, 16, "https")["requests"]
                finally:
                    proxy.send_signal(stop)
                    proxy.wait(120)
                events, totals = ins.read_totals(out)
                if not totals or not n:
                    raise RuntimeError(f"{binary}: no instruction total or no requests ({out})")
                line = f"{binary}  {workload}  requests {n}  instructions/request {totals[0] / n:.0f}"
                if cache_sim:
                    line += "  per request: " + "  ".join(f"{e} {t / n:.0f}" for e, t in zip(events, totals))
                print(f"{line}  ({out})", flush=True)
    finally:
        c.stop(backend)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--binary", default=c.SHARDGATE)
    ap.add_argument("--baseline", help="an older shardgate binary, measured in the same run")
    ap.add_argument("--only", default="nginx,haproxy,shardgate")
    ap.add_argument("--instructions", nargs="+", metavar="BIN", help="count instructions of these binaries")
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--cache-sim", action="store_true",
                    help="with --instructions: callgrind's cache and branch model too, per request")
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="a subset of " + ",".join(WORKLOADS))
    ap.add_argument("--same-fields", action="store_true",
                    help="nginx and HAProxy add the fields shardgate adds (as compare.py's --same-fields)")
    args = ap.parse_args()
    args.workloads = args.workloads.split(",")
    if not set(args.workloads) <= set(WORKLOADS):
        ap.error(f"--workloads: choose from {','.join(WORKLOADS)}")
    if args.instructions:
        return instructions(args.instructions, args.requests, args.cache_sim)
    tmp = tempfile.mkdtemp(prefix="shardgate-tls-")
    cert, key, both = certificate(tmp)
    with open(os.path.join(tmp, "backend.conf"), "w") as f:
        f.write(c.backend_conf(tmp))
    backend = c.start([c.NGINX, "-c", os.path.join(tmp, "backend.conf"), "-p", tmp], c.LOAD_CORE)
    for port in c.BACKEND_PORTS.values():
        c.wait_port(port, backend)
    ids = c.mint_ids(200, args.binary)
    paths = [f"/v1/orders/{i}" for lst in ids.values() for i in lst]
    script = c.lua_script(tmp, ids, "path")
    confs = {"nginx": nginx_conf(tmp, cert, key, args.same_fields), "haproxy": haproxy_conf(tmp, both, args.same_fields),
             "shardgate": shardgate_conf(cert, key)}
    for name, text in confs.items():
        with open(os.path.join(tmp, f"{name}.conf"), "w") as f:
            f.write(text)
    commands = {
        "nginx": [c.NGINX, "-c", os.path.join(tmp, "nginx.conf"), "-p", tmp],
        "haproxy": [c.HAPROXY, "-f", os.path.join(tmp, "haproxy.conf")],
        "shardgate": [args.binary, "--threads", "1", "serve", "-c", os.path.join(tmp, "shardgate.conf")],
    }
    names = args.only.split(",")
    if args.baseline:
        commands["baseline"] = [args.baseline, "--threads", "1", "serve", "-c", os.path.join(tmp, "shardgate.conf")]
        names.append("baseline")
    ctx = client_context(cert)
    results = {n: {w: [] for w in WORKLOADS} for n in names}
    try:
        for rep in range(args.reps):
            for name in names:
                proc = c.start(commands[name], c.PROXY_CORE)
                try:
                    c.wait_port(PORT, proc)
                    time.sleep(0.3)
                    pids = c.pids_of(proc)
                    if "keepalive" in args.workloads:
                        results[name]["keepalive"].append(keepalive(pids, script, args.duration))
                    if "h2" in args.workloads:
                        results[name]["h2"].append(h2(pids, tmp, paths, args.duration))
                    for clients in (64, 200):
                        for mode in ("full", "resume"):
                            if f"{mode}-{clients}" in args.workloads:
                                r = measure_handshakes(pids, ctx, paths, clients, args.duration, mode == "resume")
                                results[name][f"{mode}-{clients}"].append(r)
                finally:
                    c.stop(proc)
                    time.sleep(0.5)
                print(f"rep {rep + 1}/{args.reps} {name}: " + ", ".join(
                    f"{w} {results[name][w][-1]}" for w in args.workloads), flush=True)
    finally:
        c.stop(backend)
    report(results, names, args)


def med(runs, field):
    """The median of `field` over `runs`; NaN (shown as "nan") for a workload not run."""
    return statistics.median(r[field] for r in runs) if runs else float("nan")


def ratio(results, name, other, workload, field):
    """The median of the same-repetition ratios name/other."""
    a, b = results[name][workload], results[other][workload]
    pairs = [x[field] / y[field] for x, y in zip(a, b) if y[field]]
    return statistics.median(pairs) if pairs else float("nan")


def report(results, names, args):
    print(f"\nmedians of {args.reps} repetitions, {args.duration} s each; proxy on core {c.PROXY_CORE}"
          + ("; nginx and HAProxy add shardgate's fields" if args.same_fields else ""))
    print("\n| proxy | HTTPS keep-alive req/s | CPU µs/req | h2 req/s | CPU µs/req | full 64: CPU µs/handshake | full 200 | "
          "resume 64: resumed | CPU µs | resume 200: resumed | CPU µs | errors |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n in names:
        r = results[n]
        errors = sum(x["errors"] for w in args.workloads for x in r[w])
        print(f"| {n} | {med(r['keepalive'], 'rps'):,.0f} | {med(r['keepalive'], 'cpu_us'):.1f} | "
              f"{med(r['h2'], 'rps'):,.0f} | {med(r['h2'], 'cpu_us'):.1f} | "
              f"{med(r['full-64'], 'cpu_us'):.0f} | {med(r['full-200'], 'cpu_us'):.0f} | "
              f"{med(r['resume-64'], 'resumed_pct'):.1f}% | {med(r['resume-64'], 'cpu_us'):.0f} | "
              f"{med(r['resume-200'], 'resumed_pct'):.1f}% | {med(r['resume-200'], 'cpu_us'):.0f} | {errors} |")
    print("\nHTTP/2 CPU a request, user + system: " + ", ".join(
        f"{n} {med(results[n]['h2'], 'usr_us'):.2f} + {med(results[n]['h2'], 'sys_us'):.2f} µs" for n in names))
    if "shardgate" not in names:
        return
    print("\nshardgate's same-repetition ratios (CPU below 1 and req/s above 1 favour shardgate):")
    print("\n| against | keep-alive CPU/req | keep-alive req/s | h2 CPU/req | h2 req/s | full 64 CPU | full 200 CPU | resume 64 CPU | "
          "resume 200 CPU |")
    print("|---|---|---|---|---|---|---|---|---|")
    for other in (n for n in names if n != "shardgate"):
        print(f"| {other} | {ratio(results, 'shardgate', other, 'keepalive', 'cpu_us'):.2f} | "
              f"{ratio(results, 'shardgate', other, 'keepalive', 'rps'):.2f} | "
              f"{ratio(results, 'shardgate', other, 'h2', 'cpu_us'):.2f} | "
              f"{ratio(results, 'shardgate', other, 'h2', 'rps'):.2f} | "
              + " | ".join(f"{ratio(results, 'shardgate', other, w, 'cpu_us'):.2f}"
                           for w in ("full-64", "full-200", "resume-64", "resume-200")) + " |")


if __name__ == "__main__":
    main()
