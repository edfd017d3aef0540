#!/usr/bin/env python3
"""gRPC interop peer for tests/it/grpc.rs, on Python's grpcio (not ours).

  interop.py serve REGION [not-serving] [tls=CERT,KEY] [age=MS]
                                a backend: prints its port, serves until
                                killed; its grpc.health.v1 Check answers
                                SERVING, or NOT_SERVING when told; over TLS
                                with that certificate and key when given;
                                closing each connection (GOAWAY) after MS
  interop.py call ADDRESS ID    a client through the proxy: prints one JSON
                                object of what each call saw
  interop.py big ADDRESS ID MIB one client-streaming call of MIB 1 MiB
                                messages; prints the answer
  interop.py fields ADDRESS ID  the same, the id in a field of the first
                                message (field.Echo: field 1; nested.Echo:
                                field 1 of the message in field 2)

Messages are raw bytes (no schema): the methods of /echo.Echo answer with
the serving region so the test sees where each call landed.
"""
import json
import sys
import time
from concurrent import futures

import grpc

SERVICE = "echo.Echo"


def serve(region, serving=True, tls=None, age=None):
    tag = region.encode()

    def check(request, context):
        # HealthCheckResponse { status = 1 SERVING | 2 NOT_SERVING }
        return b"\x08\x01" if serving else b"\x08\x02"

    def unary(request, context):
        context.set_trailing_metadata((("x-region", region),))
        return tag + b":" + request

    def collect(requests, context):
        parts = [r for r in requests]
        return tag + b":" + b"+".join(parts)

    def fan(request, context):
        for i in range(int(request.decode() or "3")):
            yield tag + b":" + str(i).encode()

    def chat(requests, context):
        for r in requests:
            yield tag + b":" + r

    def fail(request, context):
        context.set_trailing_metadata((("x-detail", "why-" + region), ("grpc-status-details-bin", b"\x08\x09detail")))
        context.abort(grpc.StatusCode.FAILED_PRECONDITION, "nope from " + region)

    def whoami(request, context):
        seen = dict(context.invocation_metadata()).get("x-entity-id", "")
        return tag + b":" + seen.encode()

    def slow(request, context):
        time.sleep(3)
        return tag

    def big(requests, context):
        n = 0
        for r in requests:
            n += len(r)
        return tag + b":" + str(n).encode()

    handlers = {
        "Unary": grpc.unary_unary_rpc_method_handler(unary),
        "Collect": grpc.stream_unary_rpc_method_handler(collect),
        "Fan": grpc.unary_stream_rpc_method_handler(fan),
        "Chat": grpc.stream_stream_rpc_method_handler(chat),
        "Fail": grpc.unary_unary_rpc_method_handler(fail),
        "Slow": grpc.unary_unary_rpc_method_handler(slow),
        "WhoAmI": grpc.unary_unary_rpc_method_handler(whoami),
        "Big": grpc.stream_unary_rpc_method_handler(big),
    }
    options = [("grpc.max_receive_message_length", 64 << 20)]
    if age:
        options += [("grpc.max_connection_age_ms", int(age)), ("grpc.max_connection_age_grace_ms", 100)]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=128), options=options)
    health = {"Check": grpc.unary_unary_rpc_method_handler(check)}
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(SERVICE, handlers),
            grpc.method_handlers_generic_handler("field.Echo", handlers),
            grpc.method_handlers_generic_handler("nested.Echo", handlers),
            grpc.method_handlers_generic_handler("orders.Create", handlers),
            grpc.method_handlers_generic_handler("grpc.health.v1.Health", health),
        )
    )
    if tls:
        cert, key = (open(path, "rb").read() for path in tls)
        port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials([(key, cert)]))
    else:
        port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    server.wait_for_termination()


def call(address, entity):
    md = (("x-entity-id", entity),)
    out = {}
    with grpc.insecure_channel(address, options=[("grpc.max_send_message_length", 64 << 20)]) as ch:
        m = lambda kind, name: getattr(ch, kind)(f"/{SERVICE}/{name}")
        resp, c = m("unary_unary", "Unary").with_call(b"hi", metadata=md, timeout=10)
        out["unary"] = resp.decode()
        out["unary_trailers"] = dict(c.trailing_metadata() or ())
        out["collect"] = m("stream_unary", "Collect")(iter([b"a", b"b", b"c"]), metadata=md, timeout=10).decode()
        out["fan"] = [r.decode() for r in m("unary_stream", "Fan")(b"4", metadata=md, timeout=10)]

        # Bidirectional, in turns: each message is sent only after the answer to the last.
        import queue
        q = queue.Queue()
        q.put(b"one")

        def turns():
            while True:
                item = q.get()
                if item is None:
                    return
                yield item

        answers = []
        for r in m("stream_stream", "Chat")(turns(), metadata=md, timeout=10):
            answers.append(r.decode())
            q.put(b"two" if len(answers) == 1 else None)
        out["chat"] = answers

        try:
            m("unary_unary", "Fail")(b"x", metadata=md, timeout=10)
            out["fail"] = "no error"
        except grpc.RpcError as e:
            out["fail"] = {
                "code": e.code().name,
                "details": e.details(),
                "trailers": {k: (v.hex() if isinstance(v, bytes) else v) for k, v in (e.trailing_metadata() or ())},
            }

        started = time.monotonic()
        try:
            m("unary_unary", "Slow")(b"x", metadata=md, timeout=0.5)
            out["slow"] = "no error"
        except grpc.RpcError as e:
            out["slow"] = e.code().name
        out["slow_seconds"] = round(time.monotonic() - started, 2)

        chunk = b"x" * (1 << 20)
        out["big"] = m("stream_unary", "Big")(iter([chunk] * 16), metadata=md, timeout=30).decode()

        for name, meta in [("bad_id", (("x-entity-id", "not-an-id"),)), ("no_id", ())]:
            try:
                m("unary_unary", "Unary")(b"hi", metadata=meta, timeout=10)
                out[name] = "no error"
            except grpc.RpcError as e:
                out[name] = {"code": e.code().name, "details": e.details()}
    print(json.dumps(out), flush=True)


def varint(n):
    out = b""
    while n >= 0x80:
        out += bytes([n & 0x7F | 0x80])
        n >>= 7
    return out + bytes([n])


def length_delimited(number, payload):
    """A protobuf field of wire type 2 (a field number under 16)."""
    return bytes([number << 3 | 2]) + varint(len(payload)) + payload


def fields(address, entity):
    import uuid

    text = entity.encode()
    # An unknown varint field before the id, which the walker skips.
    top = b"\x18\x05" + length_delimited(1, text)
    nested = b"\x18\x05" + length_delimited(2, b"\x10\x01" + length_delimited(1, text))
    raw = length_delimited(1, uuid.UUID(entity).bytes)
    out = {}

    def outcome(f):
        try:
            return f().decode(errors="replace").split(":")[0]
        except grpc.RpcError as e:
            return {"code": e.code().name, "details": e.details()}

    with grpc.insecure_channel(address, options=[("grpc.max_send_message_length", 64 << 20)]) as ch:
        u = lambda service: ch.unary_unary(f"/{service}/Unary")
        out["top"] = outcome(lambda: u("field.Echo")(top, timeout=10))
        out["nested"] = outcome(lambda: u("nested.Echo")(nested, timeout=10))
        out["raw"] = outcome(lambda: u("field.Echo")(raw, timeout=10))
        out["chat"] = outcome(
            lambda: next(iter(ch.stream_stream("/field.Echo/Chat")(iter([top, b"second"]), timeout=10)))
        )
        out["collect"] = outcome(lambda: ch.stream_unary("/field.Echo/Collect")(iter([top, b"x" * 100000]), timeout=10))
        out["missing"] = outcome(lambda: u("field.Echo")(b"\x18\x05", timeout=10))
        out["twice"] = outcome(lambda: u("field.Echo")(top + length_delimited(1, text), timeout=10))
        padding = length_delimited(4, b"x" * 70000)
        out["large"] = outcome(lambda: u("field.Echo")(top + padding, timeout=10))
        # Large and repetitive, so that gzip does make it smaller and it goes compressed.
        compressible = top + length_delimited(4, b"x" * 4000)
        out["compressed"] = outcome(lambda: u("field.Echo")(compressible, timeout=10, compression=grpc.Compression.Gzip))
    print(json.dumps(out), flush=True)


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "serve":
        extra = sys.argv[3:]
        tls = next((e[4:].split(",") for e in extra if e.startswith("tls=")), None)
        age = next((e[4:] for e in extra if e.startswith("age=")), None)
        serve(sys.argv[2], serving="not-serving" not in extra, tls=tls, age=age)
    elif len(sys.argv) == 4 and sys.argv[1] == "call":
        call(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 5 and sys.argv[1] == "big":
        with grpc.insecure_channel(sys.argv[2], options=[("grpc.max_send_message_length", 64 << 20)]) as ch:
            parts = iter([b"x" * (1 << 20)] * int(sys.argv[4]))
            md = (("x-entity-id", sys.argv[3]),)
            print(ch.stream_unary(f"/{SERVICE}/Big")(parts, metadata=md, timeout=60).decode(), flush=True)
    elif len(sys.argv) == 4 and sys.argv[1] == "fields":
        fields(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
