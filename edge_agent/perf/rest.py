"""``edge-agent perf -i http``: KServe v2 REST, as perf_analyzer speaks it.

The model is described with ``GET /v2/models/NAME`` and ``.../config``; each request is built
once as the whole HTTP/1.1 message (request line, headers, body) with its inputs in the binary
tensor extension (JSON header of ``Inference-Header-Content-Length`` bytes, then the raw
bytes) or as JSON, and the outputs asked for raw (``binary_data_output``) or as JSON. The
closed loop (:mod:`edge_agent.perf.load`) sends those bytes on one keep-alive connection per
worker and reads only the status line, the headers and ``Content-Length`` bytes of body, so the
generator spends little CPU on a machine whose cores it shares with the server it measures.
"""

from __future__ import annotations

import asyncio
import http.client
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import numpy as np

from edge_agent.errors import InvalidInputError
from edge_agent.frontends.common.shared_memory import BYTE_SIZE, OFFSET, REGION
from edge_agent.frontends.http.tensors import BINARY_SIZE, HEADER_LENGTH
from edge_agent.perf.inputs import ServedModel, ServedTensor
from packager.bundle.datatypes import datatype_of

DEFAULT_HTTP_URL = "localhost:8000"
"""perf_analyzer's default for ``-i http`` (the agent's ``serve --http`` port is the user's)."""

FORMATS = ("binary", "json")
"""``--input-tensor-format`` / ``--output-tensor-format`` values."""

Where = Mapping[str, tuple[str, int, int]]
"""Tensor name -> (shared memory region, offset, byte size)."""


@dataclass(frozen=True)
class HttpTarget:
    """Where a KServe v2 REST server listens."""

    host: str
    port: int

    @property
    def label(self) -> str:
        return f"{self.host}:{self.port}"


def http_target(url: str) -> HttpTarget:
    """``HOST:PORT`` or ``http://HOST:PORT`` (perf_analyzer's ``-u`` for ``-i http``)."""
    text = url.removeprefix("http://").rstrip("/")
    if url.startswith(("unix:", "https://")) or "/" in text:
        raise InvalidInputError(f"-u {url}: -i http takes HOST:PORT (or http://HOST:PORT) of "
                                "the agent's HTTP listener (edge-agent serve --http); Unix "
                                "sockets and TLS are for -i grpc")
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidInputError(f"-u {url}: expected HOST:PORT, e.g. 127.0.0.1:8000")
    return HttpTarget(host.strip("[]"), int(port))


def model_path(model: str, version: str = "") -> str:
    """``/v2/models/NAME[/versions/V]`` (the name quoted for a path)."""
    path = f"/v2/models/{quote(model, safe='')}"
    return path + (f"/versions/{quote(version, safe='')}" if version else "")


def get_json(target: HttpTarget, path: str, timeout_s: float = 30.0) -> Any:
    """``GET path`` as JSON; InvalidInputError naming the server's error or why none answered
    (a gRPC port answers no HTTP/1.1)."""
    conn = http.client.HTTPConnection(target.host, target.port, timeout=timeout_s)
    try:
        conn.request("GET", path)
        answer = conn.getresponse()
        body = answer.read()
    except (OSError, http.client.HTTPException) as exc:
        why = ("what answered is not HTTP/1.1 (a gRPC port speaks HTTP/2)"
               if isinstance(exc, http.client.BadStatusLine) else
               f"{type(exc).__name__}: {exc}")
        raise InvalidInputError(
            f"{target.label}: no HTTP/1.1 answer to GET {path} ({why}); give the port of the "
            "agent's HTTP listener (edge-agent serve --http), or use -i grpc for its gRPC "
            "port") from None
    finally:
        conn.close()
    if answer.status != 200:
        raise InvalidInputError(f"{target.label}: GET {path}: HTTP {answer.status}: "
                                f"{error_text(body)}")
    try:
        return json.loads(body)
    except ValueError:
        raise InvalidInputError(f"{target.label}: GET {path} did not answer JSON") from None


def error_text(body: bytes) -> str:
    """The ``error`` of a KServe v2 error body, else the body's start."""
    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("error"), str):
        return str(doc["error"])
    return body[:200].decode("utf-8", "replace") or "(no body)"


def describe_model_http(target: HttpTarget, model: str, version: str = "") -> ServedModel:
    """The model's metadata and configuration over KServe v2 REST."""
    path = model_path(model, version)
    meta = get_json(target, path)
    config = get_json(target, path + "/config")
    if isinstance(config, dict) and isinstance(config.get("config"), dict):
        config = config["config"]  # some servers wrap it

    def spec(t: dict[str, Any]) -> ServedTensor:
        return ServedTensor(str(t["name"]), str(t["datatype"]), tuple(int(d) for d in t["shape"]))

    try:
        return ServedModel(model, tuple(spec(t) for t in meta.get("inputs", [])),
                         tuple(spec(t) for t in meta.get("outputs", [])),
                         int(config.get("max_batch_size", 0) or 0))
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise InvalidInputError(f"{target.label}: the metadata of model {model!r} is not "
                                f"KServe v2 JSON ({exc})") from None


def infer_message(target: HttpTarget, model: str, inputs: Mapping[str, np.ndarray],
                  version: str = "", *, input_format: str = "binary",
                  output_format: str = "binary", regions: Where | None = None,
                  outputs: Where | None = None) -> bytes:
    """The whole HTTP/1.1 ``POST .../infer`` message for one request of ``inputs`` (or their
    shared memory ``regions``; ``outputs`` asks outputs into regions)."""
    raw: list[bytes] = []
    tensors = []
    for name, array in inputs.items():
        tensor: dict[str, Any] = {"name": name, "datatype": datatype_of(array.dtype) or "",
                                  "shape": list(array.shape)}
        if regions and name in regions:
            tensor["parameters"] = _placed(regions[name])
        elif input_format == "binary":
            data = np.ascontiguousarray(array).tobytes()
            tensor["parameters"] = {BINARY_SIZE: len(data)}
            raw.append(data)
        else:
            tensor["data"] = array.ravel().tolist()
        tensors.append(tensor)
    doc: dict[str, Any] = {"inputs": tensors,
                           "parameters": {"binary_data_output": output_format == "binary"}}
    if outputs:
        doc["outputs"] = [{"name": n, "parameters": _placed(w)} for n, w in outputs.items()]
    header = json.dumps(doc, separators=(",", ":")).encode()
    body = header + b"".join(raw)
    lines = [f"POST {model_path(model, version)}/infer HTTP/1.1", f"Host: {target.label}",
             f"Content-Length: {len(body)}"]
    if raw:
        lines += ["Content-Type: application/octet-stream", f"{HEADER_LENGTH}: {len(header)}"]
    else:
        lines.append("Content-Type: application/json")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def _placed(where: tuple[str, int, int]) -> dict[str, Any]:
    region, offset, size = where
    return {REGION: region, OFFSET: offset, BYTE_SIZE: size}


def post_json(target: HttpTarget, path: str, doc: Mapping[str, Any],
              timeout_s: float = 30.0) -> None:
    """``POST path`` with a JSON body; InvalidInputError unless it answers 200."""
    conn = http.client.HTTPConnection(target.host, target.port, timeout=timeout_s)
    try:
        conn.request("POST", path, body=json.dumps(doc),
                     headers={"Content-Type": "application/json"})
        answer = conn.getresponse()
        body = answer.read()
    except (OSError, http.client.HTTPException) as exc:
        raise InvalidInputError(f"{target.label}: POST {path}: {exc}") from None
    finally:
        conn.close()
    if answer.status != 200:
        raise InvalidInputError(f"{target.label}: POST {path}: HTTP {answer.status}: "
                                f"{error_text(body)}")


@dataclass(frozen=True)
class RestRegions:
    """Registers system shared memory regions over KServe v2 REST (``--shared-memory system``
    with ``-i http``)."""

    target: HttpTarget

    def register(self, name: str, byte_size: int) -> None:
        post_json(self.target, f"/v2/systemsharedmemory/region/{quote(name, safe='')}/register",
                  {"key": f"/{name}", "offset": 0, "byte_size": byte_size})

    def unregister(self, name: str) -> None:
        post_json(self.target,
                  f"/v2/systemsharedmemory/region/{quote(name, safe='')}/unregister", {})


class CallFailed(Exception):
    """One request that got no successful answer (the message says why)."""


class HttpConnection:
    """One keep-alive connection of the closed loop: sends a prepared message, reads the
    answer's head and ``Content-Length`` bytes of body; reconnects after a close."""

    def __init__(self, target: HttpTarget) -> None:
        self.target = target
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def send(self, message: bytes) -> None:
        """One request; CallFailed unless it is answered 200."""
        try:
            if self._writer is None:
                self._reader, self._writer = await asyncio.open_connection(
                    self.target.host, self.target.port)
            assert self._reader is not None
            self._writer.write(message)
            head = await self._reader.readuntil(b"\r\n\r\n")
            status, length, close = _parse_head(head)
            body = await self._reader.readexactly(length)
        except (OSError, EOFError, asyncio.LimitOverrunError, ValueError) as exc:
            self.close()  # asyncio.IncompleteReadError is an EOFError
            raise CallFailed(f"connection to {self.target.label}: "
                             f"{type(exc).__name__}: {exc}") from None
        if close:
            self.close()
        if status != 200:
            raise CallFailed(f"HTTP {status}: {error_text(body)}")

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None


def _parse_head(head: bytes) -> tuple[int, int, bool]:
    """(status, Content-Length, whether the server closes) of an answer's head."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise ValueError(f"not an HTTP/1.1 answer: {lines[0][:80]!r}")
    length, close = None, parts[0] == "HTTP/1.0"
    for line in lines[1:]:
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key == "content-length":
            length = int(value.strip())
        elif key == "connection":
            close = value.strip().lower() == "close"
        elif key == "transfer-encoding":
            raise ValueError(f"Transfer-Encoding {value.strip()} answers are not read")
    if length is None:
        raise ValueError("the answer has no Content-Length")
    return int(parts[1]), length, close
