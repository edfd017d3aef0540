#!/usr/bin/env python3
"""An OTLP/HTTP sink for load runs with traces on: answers every POST to
/v1/traces with 200 and counts the exports and their bytes (printed at exit).

    python3 benches/load/otlp_sink.py --port 4318 &
    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 benches/load/run --only shardgate --baseline OLD
"""
import argparse
import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

exports = 0
received = 0


class Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        global exports, received
        length = int(self.headers.get("content-length", "0") or 0)
        body = self.rfile.read(length)
        exports += 1
        received += len(body)
        self.send_response(200 if self.path == "/v1/traces" else 404)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=4318)
    args = ap.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Sink)

    def stop(*_):
        print(f"otlp sink: {exports} exports, {received} bytes", file=sys.stderr)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    server.serve_forever()


if __name__ == "__main__":
    main()
