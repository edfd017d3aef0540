#!/usr/bin/env python3
"""Memory of held uploads: a move in `hold` parks each write before its body
is read, so N held uploads of 1 MiB should cost N connections, not N MiB.

Starts BINARY on a table whose country KZ is held, opens N connections that
each send a PUT head announcing a 1 MiB body and its first 64 KiB, waits
until the proxy counts them all held (shardgate_move_requests_total), and
reads the proxy's resident memory (VmRSS) before, with N/10 and with N held.
(That held requests are released to the new owner, and with their bodies,
is tested in tests/it/rehoming.rs.)

    benches/rehoming_memory.py BINARY [--uploads 10000]
"""

import argparse
import http.server
import os
import resource
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

KZ_ID = None  # filled by mint()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def metric(admin, name):
    text = urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(name):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


class Backend(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_PUT(self):
        n = int(self.headers.get("content-length", "0"))
        while n > 0:
            chunk = self.rfile.read(min(n, 1 << 16))
            if not chunk:
                break
            n -= len(chunk)
        self.send_response(200)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def do_GET(self):
        self.send_response(200)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


class Threaded(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    request_queue_size = 4096


TABLE = """version: 1
listen: 127.0.0.1:{port}
admin: 127.0.0.1:{admin}
server: {{ max_connections: 30000 }}
upstream: {{ max_connections: 512, max_pending: 20000, attempt_timeout: 120s, request_timeout: 180s }}
regions:
  eu: {{ upstreams: ["http://127.0.0.1:{backend}"] }}
  kz: {{ upstreams: ["http://127.0.0.1:{backend}"] }}
countries:
  KZ: {{ id: 7, region: {owner} }}
entities: {{ Order: 3 }}
moves:
  - {{ unit: "country KZ", to: eu, phase: {phase}, epoch: 1, hold: {{ max_requests: 50000, max_time: 300s }}, release_rate: 400 }}
routes:
  - name: orders
    match: {{ path: "/v1/orders/{{id}}" }}
    id: {{ path_param: id, formats: [iuid] }}
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--uploads", type=int, default=10000)
    args = ap.parse_args()
    # The proxy allows half its open files as client connections (each may
    # hold an upstream one): raised for it too where this user may.
    want = 2 * args.uploads + 1000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(want, hard), max(want, hard)))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if want > hard:
        sys.exit(f"the open-file limit ({hard}) is below {want}: {args.uploads} uploads need twice as many")
    kz = subprocess.run([args.binary, "mint", "--format", "iuid", "--country", "7", "--entity", "3"],
                        capture_output=True, text=True).stdout.split()
    if not kz:
        sys.exit("cannot mint a KZ id")
    kz_id = kz[0]

    backend = Threaded(("127.0.0.1", 0), Backend)
    threading.Thread(target=backend.serve_forever, daemon=True).start()
    port, admin = free_port(), free_port()
    d = tempfile.mkdtemp()
    path = os.path.join(d, "table.yaml")
    fill = dict(port=port, admin=admin, backend=backend.server_address[1])
    with open(path, "w") as f:
        f.write(TABLE.format(owner="kz", phase="hold", **fill))
    proc = subprocess.Popen([args.binary, "serve", "-c", path], stderr=open(os.path.join(d, "proxy.log"), "w"))
    print(f"proxy log: {d}/proxy.log", file=sys.stderr)
    try:
        for _ in range(200):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{admin}/ready", timeout=1)
                break
            except Exception:
                time.sleep(0.05)
        time.sleep(0.5)
        base = rss_kib(proc.pid)
        head = (f"PUT /v1/orders/{kz_id} HTTP/1.1\r\nhost: x\r\ncontent-length: {1 << 20}\r\n\r\n").encode()
        first = b"x" * (64 << 10)
        socks, marks = [], {}
        for i in range(args.uploads):
            s = socket.create_connection(("127.0.0.1", port))
            s.setblocking(False)
            try:
                s.send(head + first)
            except BlockingIOError:
                pass
            socks.append(s)
            if i % 256 == 255:
                # Paced, so the listen backlog is not what is measured.
                time.sleep(0.05)
            if i + 1 in (args.uploads // 10, args.uploads):
                deadline = time.time() + 60
                while metric(admin, 'shardgate_move_requests_total{unit="country KZ",result="held"}') < i + 1:
                    if time.time() > deadline:
                        sys.exit(f"only {metric(admin, 'shardgate_move_requests_total')} held of {i + 1}")
                    time.sleep(0.1)
                time.sleep(0.5)
                marks[i + 1] = rss_kib(proc.pid)
        n = args.uploads
        print(f"uploads: {n} of 1 MiB each (64 KiB of each sent), held before their body was read")
        print(f"proxy RSS idle:            {base / 1024:8.1f} MiB")
        for k, v in sorted(marks.items()):
            print(f"proxy RSS with {k:6d} held: {v / 1024:8.1f} MiB  (+{(v - base) / k:.1f} KiB per held upload)")
        print(f"bodies held back:          {n} MiB in the clients' sockets and kernel buffers, not the proxy's memory")
        return 0
    finally:
        proc.kill()


if __name__ == "__main__":
    sys.exit(main())
