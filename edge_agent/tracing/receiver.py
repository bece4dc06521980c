"""A minimal OTLP/HTTP trace receiver: see the agent's spans without running a collector.

    python -m edge_agent.tracing.receiver --port 4318     # prints one line per span

It accepts ``POST /v1/traces`` (protobuf ``ExportTraceServiceRequest``) on 127.0.0.1 and keeps
the spans; the tests use it as the collector. Not a collector: no storage, no forwarding.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Receiver:
    """Spans posted to ``/v1/traces`` on 127.0.0.1 (``port`` 0: any free port), decoded;
    ``on_span`` is called with each as it arrives."""

    def __init__(self, port: int = 0, on_span: Callable[[Any], None] | None = None) -> None:
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as service

        self.spans: list[Any] = []
        self.changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path != "/v1/traces":
                    self.send_error(404, "OTLP traces are posted to /v1/traces")
                    return
                request = service.ExportTraceServiceRequest()
                request.ParseFromString(body)
                spans = [s for r in request.resource_spans for sc in r.scope_spans
                         for s in sc.spans]
                with receiver.changed:
                    receiver.spans.extend(spans)
                    receiver.changed.notify_all()
                if on_span is not None:
                    for span in spans:
                        on_span(span)
                answer = service.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True,
                                        name="otlp-receiver")
        self._thread.start()

    def wait_for(self, names: set[str], deadline_s: float = 60.0) -> list[Any]:
        """The spans received, once spans of every name in ``names`` are among them
        (AssertionError naming what is missing after ``deadline_s``)."""
        end = time.monotonic() + deadline_s
        with self.changed:
            while not names <= {s.name for s in self.spans}:
                left = end - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"spans {sorted(names)} not all received within "
                                         f"{deadline_s} s; got {[s.name for s in self.spans]}")
                self.changed.wait(left)
            return list(self.spans)

    def close(self) -> None:
        """Stop listening."""
        self.server.shutdown()
        self.server.server_close()
        self._thread.join()


def _line(span: Any) -> str:
    took_us = (span.end_time_unix_nano - span.start_time_unix_nano) // 1000
    return (f"{span.trace_id.hex()} {span.span_id.hex()} {span.parent_span_id.hex() or '-':16} "
            f"{took_us:>8} us  {span.name}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=4318)
    args = parser.parse_args(argv)
    receiver = Receiver(args.port, on_span=lambda s: print(_line(s), flush=True))
    print(f"OTLP/HTTP receiver on {receiver.url}/v1/traces", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        receiver.close()


if __name__ == "__main__":
    main()
