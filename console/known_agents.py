"""Pinned agent certificates (SSH's known_hosts for agents) and the clients that rely on them.

The file is ``known_agents`` next to the console config (``~/.config/edge-console/``; the
config key ``known_agents`` moves it), one agent a line::

    # HOST:PORT  certificate fingerprint  [comment]
    192.168.1.20:50051 SHA256:4F:32:...:8A:10 line-3 2026-11-30

On first contact the console shows the agent's fingerprint and pins it: after a yes on a
terminal, or with ``--accept-new``; a script without ``--accept-new`` is refused with the
fingerprint and the way to accept it. A later certificate that differs is refused with what to
check (the agent's ``edge-agent token`` prints its fingerprint) and how to remove the stale pin.
"""

from __future__ import annotations

import fcntl
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from console.config import ConsoleSettings, default_config_path
from console.errors import ConsoleConfigError, ConsoleError
from edge_agent.client import agent_client as mgmt
from edge_agent.errors import ConfigError
from edge_agent.management.tls import fingerprint, normalize_fingerprint

FILE_NAME = "known_agents"
AskNew = Callable[[str, str, Path], bool]  # (address, fingerprint, file) -> trust it?


class UntrustedAgentError(ConsoleError, mgmt.ManagementError):
    """An agent seen for the first time, and nobody accepted its certificate.

    Also a ManagementError, so code that reports failed management calls per agent reports
    this one the same way. ``address`` and ``fingerprint`` say what to ask the operator."""

    address: str = ""
    fingerprint: str = ""


class AgentIdentityChangedError(ConsoleError, mgmt.ManagementError):
    """An agent presented another certificate than the one pinned in known_agents."""


def default_known_agents_path() -> Path:
    """``known_agents`` in the console's config directory."""
    return default_config_path().parent / FILE_NAME


@dataclass(frozen=True, slots=True)
class Pin:
    """One line of the file."""

    address: str
    fingerprint: str
    line: int


class KnownAgents:
    """The pins in ``path`` (read afresh on every lookup; appends are locked)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or default_known_agents_path()

    def pins(self) -> list[Pin]:
        """Every pin in the file (none when it does not exist)."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise ConsoleConfigError(f"cannot read {self.path}: {exc.strerror or exc}") from None
        pins = []
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split()
            try:
                if len(parts) < 2:
                    raise ConfigError("expected HOST:PORT and a fingerprint")
                pins.append(Pin(parts[0], normalize_fingerprint(parts[1]), number))
            except ConfigError as exc:
                raise ConsoleConfigError(f"{self.path} line {number}: {exc}; fix or delete "
                                         "the line") from None
        return pins

    def lookup(self, address: str) -> Pin | None:
        """The pin of ``address`` (HOST:PORT), if any."""
        return next((p for p in self.pins() if p.address == address), None)

    def add(self, address: str, fp: str, comment: str = "") -> None:
        """Pin ``fp`` for ``address`` (the directory is created 0700, the file 0600)."""
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            with os.fdopen(fd, "a") as f:
                fcntl.flock(f, fcntl.LOCK_EX)
                if self.lookup(address) is None:  # another console may have just added it
                    note = " ".join(w for w in (comment, time.strftime("%Y-%m-%d")) if w)
                    f.write(f"{address} {normalize_fingerprint(fp)} {note}\n")
        except OSError as exc:
            raise ConsoleConfigError(f"cannot write {self.path}: {exc.strerror or exc}") from None

    def removal_hint(self, pin: Pin) -> str:
        """How to remove a stale pin."""
        return (f"remove line {pin.line} of {self.path} (e.g. sed -i '{pin.line}d' "
                f"{self.path}) and connect again to pin the new certificate")


_ask_lock = threading.Lock()


def ask_on_terminal(address: str, fp: str, path: Path) -> bool:
    """SSH's question on stderr/stdin: trust this agent's certificate?"""
    with _ask_lock:
        print(f"The authenticity of agent {address} can't be established.\n"
              f"Its certificate fingerprint is {fp}.\n"
              "Compare it with `edge-agent token --state-dir DIR` on the device.",
              file=sys.stderr)
        while True:
            print(f"Trust it and remember it in {path} (yes/no)? ", end="", file=sys.stderr,
                  flush=True)
            try:
                answer = input().strip().lower()
            except EOFError:
                return False
            if answer in ("yes", "no"):
                return answer == "yes"
            print("Please type 'yes' or 'no'.", file=sys.stderr)


def changed_error(exc: mgmt.CertificateChangedError, known: KnownAgents,
                  address: str) -> AgentIdentityChangedError:
    """The SSH-style refusal of a changed certificate, naming the stale line."""
    pin = known.lookup(address)
    where = (known.removal_hint(pin) if pin is not None
             else "update the fingerprint the console was given")
    return AgentIdentityChangedError(
        f"AGENT IDENTIFICATION HAS CHANGED for {address}: it presented {exc.presented}, but "
        f"{known.path} pins {exc.pinned}. Someone could be intercepting the connection (man in "
        "the middle), or the agent's certificate was recreated (state directory replaced, "
        "tls/ deleted). Check on the device: `edge-agent token --state-dir DIR` prints its "
        f"fingerprint. Only if it is the new one, {where}", "FAILED_PRECONDITION")


def client_tls(address: str, settings: ConsoleSettings, *, timeout_s: float = 10.0
               ) -> mgmt.ClientTls | mgmt.PinnedTls | None:
    """How to reach the agent at ``address``: None (plaintext, ``--insecure``), a CA from the
    console config, or its pinned certificate (pinned now on first contact when accepted).

    Raises UntrustedAgentError (first contact, not accepted), AgentIdentityChangedError, or
    the management client's errors (unreachable, plaintext agent).
    """
    if settings.insecure:
        return None
    files = settings.tls_for(address)
    cert, key = (files.cert, files.key) if files is not None else (None, None)
    if files is not None and files.ca is not None:
        return mgmt.ClientTls(ca=files.ca, cert=cert, key=key, server_name=files.server_name)
    known = KnownAgents(settings.known_agents)
    pin = known.lookup(address)
    if pin is not None:
        return mgmt.PinnedTls(pin.fingerprint, cert=cert, key=key)
    fp = fingerprint(mgmt.fetch_certificate(address, timeout_s=timeout_s, cert=cert, key=key))
    if settings.accept_new or (settings.ask_new is not None
                               and settings.ask_new(address, fp, known.path)):
        known.add(address, fp)
        return mgmt.PinnedTls(fp, cert=cert, key=key)
    untrusted = UntrustedAgentError(
        f"agent {address} is not known yet (no pin in {known.path}); its certificate "
        f"fingerprint is {fp}. Compare it with `edge-agent token --state-dir DIR` on the "
        "device, then accept it: rerun with --accept-new (or answer yes on a terminal)",
        "FAILED_PRECONDITION")
    untrusted.address, untrusted.fingerprint = address, fp
    raise untrusted


def open_client(address: str, settings: ConsoleSettings, token: str | None, *,
                timeout_s: float = 10.0) -> mgmt.AgentClient:
    """A management client for ``address`` with the TLS :func:`client_tls` decides."""
    tls = client_tls(address, settings, timeout_s=min(timeout_s, 10.0))
    try:
        return mgmt.AgentClient(address, token=token, timeout_s=timeout_s, tls=tls)
    except mgmt.CertificateChangedError as exc:
        raise changed_error(exc, KnownAgents(settings.known_agents), address) from None
