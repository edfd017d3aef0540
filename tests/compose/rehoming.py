#!/usr/bin/env python3
"""Load for the compose test's live re-homing: 64 clients on the host, each
sending in turn a write of a KZ order (PUT), a read of it and a read of a DE
order, through the front door and each regional gateway in turn, until the
file STOP exists. Every answer is written to OUT as a JSON line:
{"t": start (Unix s), "kind": "kz_write"|"kz_read"|"de_read", "via": BASE_URL,
"status": N (0: no answer), "backend": the region whose backend answered,
"ms": latency, "id": the answer's X-Request-Id, "error": why there was no
answer or no JSON (empty when there was)}.

    rehoming.py OUT STOP KZ_ID DE_ID BASE_URL...
"""

import json
import sys
import threading
import time
import urllib.error
import urllib.request

out_path, stop_path, kz_id, de_id = sys.argv[1:5]
bases = sys.argv[5:]
lock = threading.Lock()
out = open(out_path, "w")


def one(method, url, body):
    """(status, backend region, request id, error)"""
    req = urllib.request.Request(url, data=body, method=method)
    status, rid = 0, ""
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            status, rid = r.status, r.headers.get("x-request-id", "")
            return status, json.loads(r.read() or b"{}").get("region", ""), rid, ""
    except urllib.error.HTTPError as e:
        return e.code, "", e.headers.get("x-request-id", ""), e.read()[:200].decode("utf-8", "replace")
    except Exception as e:
        return status, "", rid, f"{type(e).__name__}: {e}"


def client(n):
    import os
    i = n
    while not os.path.exists(stop_path):
        i += 1
        base = bases[i % len(bases)]
        kind = ("kz_write", "kz_read", "de_read")[i % 3]
        method, oid, body = {
            "kz_write": ("PUT", kz_id, b'{"state":"paid"}'),
            "kz_read": ("GET", kz_id, None),
            "de_read": ("GET", de_id, None),
        }[kind]
        t = time.time()
        status, backend, rid, error = one(method, f"{base}/v1/orders/{oid}", body)
        line = json.dumps({"t": t, "kind": kind, "via": base, "status": status, "backend": backend,
                           "ms": round((time.time() - t) * 1000, 1), "id": rid, "error": error})
        with lock:
            out.write(line + "\n")


threads = [threading.Thread(target=client, args=(n,)) for n in range(64)]
for t in threads:
    t.start()
for t in threads:
    t.join()
out.close()
