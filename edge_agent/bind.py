"""Bind a gRPC server to an address with one clear error line, not gRPC's C++ log line.

gRPC's core logs a failed bind on stderr (``E1130 ... add_port.cc:83] Failed to add port ...``)
before Python sees the error. :func:`add_port` captures stderr (the file descriptor) for the
bind attempt only: gRPC's own lines are dropped, the reason they give (``Address already in
use``) goes into our message, and anything else written meanwhile is passed on.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator

import grpc

from edge_agent.errors import ConfigError

_GRPC_LOG_LINE = re.compile(rb"^[EWID]\d{4} [\d:.]+\s+\d+ \S+:\d+\] ")
_BIND_REASON = re.compile(r"Error in bind for address '[^']*': ([^)]+)\)")


@contextlib.contextmanager
def _stderr_captured() -> Iterator[list[str]]:
    """Redirect fd 2 to a temp file; yield a list that gets gRPC's log lines afterwards."""
    grpc_lines: list[str] = []
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no usable fd 2: nothing to capture
        yield grpc_lines
        return
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield grpc_lines
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            others = []
            for line in tmp.read().splitlines(keepends=True):
                if _GRPC_LOG_LINE.match(line):
                    grpc_lines.append(line.decode(errors="replace").strip())
                else:
                    others.append(line)
            if others:
                os.write(2, b"".join(others))


def add_port(server: grpc.Server, address: str, *, where: str,
             credentials: grpc.ServerCredentials | None = None) -> int:
    """Bind ``server`` to ``address`` (TLS with ``credentials``); return the port.

    ConfigError naming ``where`` (the flag or config key) and gRPC's reason on failure.
    """
    with _stderr_captured() as logged:
        try:
            if credentials is not None:
                port = server.add_secure_port(address, credentials)
            else:
                port = server.add_insecure_port(address)
        except RuntimeError:
            port = 0
    if port:
        return port
    reasons = [m.group(1).strip() for line in logged for m in [_BIND_REASON.search(line)] if m]
    reason = reasons[0] if reasons else "gRPC could not bind it"
    hint = ("another process holds the port: stop it or pick another port"
            if "in use" in reason.lower() else "check the host and port")
    raise ConfigError(f"{where}: cannot listen on {address}: {reason}; {hint}")
