"""A hostile OCI registry of our own on 127.0.0.1: the distribution endpoints a pull uses
(``/v2/``, manifests, blobs), serving what the test stores and lying as told: a declared size
that is not sent, a reset or a stall mid-blob, wrong bytes, redirects elsewhere, nested
manifests. Used by tests/registry/test_hostile_registry.py and the soak's hostile-registry
attack (benchmarks/attacks/hostile_registry.py).
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from packager.bundle.oci import layout as L

_MANIFEST = re.compile(r"^/v2/(?P<repo>.+)/manifests/(?P<ref>[^/]+)$")
_BLOB = re.compile(r"^/v2/(?P<repo>.+)/blobs/(?P<digest>sha256:[a-f0-9]{64})$")


@dataclass
class Blob:
    """What a blob GET gets: ``data`` (Range honoured), then per ``behaviour``:
    ``"serve"`` all of it; ``"reset"`` the first ``cut`` bytes then a TCP reset; ``"stall"``
    the first ``cut`` bytes then silence until the server stops; ``"redirect"`` a 307 to
    ``location``. ``length`` overrides the Content-Length header (a lie)."""

    data: bytes = b""
    behaviour: str = "serve"
    cut: int = 0
    location: str = ""
    length: int | None = None
    endless: bool = False  # stream zeros for as long as the client reads (a huge layer)
    rate: int = 0  # endless: at most this many bytes per second (0: as fast as read)


class HostileRegistry:
    """The server; use as a context manager (stops and closes every connection on exit)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.manifests: dict[str, tuple[bytes, str]] = {}  # tag or digest -> (body, type)
        self.blobs: dict[str, Blob] = {}
        self.requests: list[str] = []  # "GET /v2/..." in arrival order
        self.blob_bytes_sent = 0
        self.stop = threading.Event()
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_HEAD(self) -> None:
                owner._handle(self, head=True)

            def do_GET(self) -> None:
                owner._handle(self, head=False)

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.address = f"{host}:{self._server.server_address[1]}"
        self._thread: threading.Thread | None = None

    # -- content -------------------------------------------------------------------------
    def put_manifest(self, body: bytes, media_type: str, *tags: str) -> str:
        """Store a manifest or index under its digest (and ``tags``); its digest."""
        digest = L.digest_of(body)
        for key in (digest, *tags):
            self.manifests[key] = (body, media_type)
        return digest

    def put_bundle(self, repo_tag: str, layer: L.Descriptor, info: L.BundleInfo,
                   blob: Blob) -> str:
        """An index at ``repo_tag`` over one profile manifest whose layer is ``layer``
        (served as ``blob``); the index's digest."""
        manifest = L.bundle_manifest(layer, info, "2026-01-01T00:00:00Z")
        self.put_manifest(manifest, L.MANIFEST_MEDIA_TYPE)
        self.blobs[layer.digest] = blob
        index = L.bundle_index([L.index_entry(manifest, info)], info.name, info.version)
        return self.put_manifest(index, L.INDEX_MEDIA_TYPE, repo_tag)

    def blob_requests(self) -> list[str]:
        with self._lock:
            return [r for r in self.requests if "/blobs/" in r]

    # -- serving -------------------------------------------------------------------------
    def _handle(self, h: BaseHTTPRequestHandler, *, head: bool) -> None:
        with self._lock:
            self.requests.append(f"{h.command} {h.path}")
        if h.path == "/v2/":
            return self._send(h, 200, b"{}", "application/json", head=head)
        m = _MANIFEST.match(h.path)
        if m and m["ref"] in self.manifests:
            body, media_type = self.manifests[m["ref"]]
            return self._send(h, 200, body, media_type, head=head,
                              extra={"Docker-Content-Digest": L.digest_of(body)})
        b = _BLOB.match(h.path)
        if b and b["digest"] in self.blobs:
            return self._blob(h, self.blobs[b["digest"]], head=head)
        self._send(h, 404, b'{"errors":[{"code":"NOT_FOUND"}]}', "application/json", head=head)

    def _send(self, h: BaseHTTPRequestHandler, status: int, body: bytes, media_type: str, *,
              head: bool, extra: dict[str, str] | None = None) -> None:
        h.send_response(status)
        h.send_header("Content-Type", media_type)
        h.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            h.send_header(k, v)
        h.end_headers()
        if not head:
            h.wfile.write(body)

    def _blob(self, h: BaseHTTPRequestHandler, blob: Blob, *, head: bool) -> None:
        if blob.behaviour == "redirect":
            h.send_response(307)
            h.send_header("Location", blob.location)
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        start = 0
        rng = re.match(r"bytes=(\d+)-$", h.headers.get("Range", ""))
        if rng and not blob.endless and int(rng[1]) < len(blob.data):
            start = int(rng[1])
        body = blob.data[start:]
        length = blob.length if blob.length is not None else len(body)
        h.send_response(206 if start else 200)
        h.send_header("Content-Type", "application/octet-stream")
        h.send_header("Content-Length", str(length))
        if start:
            h.send_header("Content-Range", f"bytes {start}-{start + length - 1}/*")
        h.end_headers()
        if head:
            return
        if blob.endless:
            return self._endless(h, length, blob.rate)
        cut = max(0, blob.cut - start) if blob.behaviour in ("reset", "stall") else len(body)
        self._write(h, body[:cut])
        if blob.behaviour == "reset":
            self._reset(h)
        elif blob.behaviour == "stall":
            h.wfile.flush()
            self.stop.wait()
            self._reset(h)

    def _endless(self, h: BaseHTTPRequestHandler, length: int, rate: int) -> None:
        zeros = bytes(1 << 16)
        sent = 0
        with contextlib.suppress(OSError):
            while sent < length and not self.stop.is_set():
                n = min(len(zeros), length - sent)
                h.wfile.write(zeros[:n])
                sent += n
                with self._lock:
                    self.blob_bytes_sent += n
                if rate:
                    self.stop.wait(n / rate)

    def _write(self, h: BaseHTTPRequestHandler, data: bytes) -> None:
        with contextlib.suppress(OSError):
            h.wfile.write(data)
            h.wfile.flush()
            with self._lock:
                self.blob_bytes_sent += len(data)

    @staticmethod
    def _reset(h: BaseHTTPRequestHandler) -> None:
        """Close with a TCP RST (SO_LINGER 0), as a dying peer or a middlebox does."""
        sock: socket.socket = h.connection
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
        h.close_connection = True

    # -- lifetime ------------------------------------------------------------------------
    def __enter__(self) -> HostileRegistry:
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.1}, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release stalled handlers, stop serving, close the socket."""
        self.stop.set()
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)


def labels(name: str, version: int, profile: str, manifest_sha256: str = "0" * 64
           ) -> L.BundleInfo:
    """The annotations of a bundle (the manifest hash is a lie unless given)."""
    return L.BundleInfo(name, version, profile, "x86_64", "onnxruntime", manifest_sha256,
                        L.UNSIGNED)


def manifest_json(obj: dict[str, Any]) -> bytes:
    """JSON bytes of a hand-written manifest."""
    return json.dumps(obj).encode()


@contextlib.contextmanager
def hostile_registry(host: str = "127.0.0.1") -> Iterator[HostileRegistry]:
    """A running :class:`HostileRegistry` on ``host`` (port from the OS), stopped after."""
    with HostileRegistry(host) as reg:
        yield reg
