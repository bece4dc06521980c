"""Hostile callers for the soak (issue 27): one module per attack, registered in ``ATTACKS``.

Each module defines ``attack(target: Target, stop: threading.Event, tally: Tally) -> None``:
it attacks ``target`` in a bounded loop on loopback until ``stop`` is set, counts what it did
in ``tally``, and releases everything it opened (sockets, files, shared memory) before it
returns. ``benchmarks/bench_soak.py --attacks all`` runs every registered attack, each on a
thread of its own, beside the legitimate callers. A new attack is one module here plus one
line in ``ATTACKS``.
"""

from __future__ import annotations

import importlib
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Target:
    """Where the agent under attack listens (all loopback)."""

    grpc: str  # "127.0.0.1:PORT"
    http: str | None = None  # "127.0.0.1:PORT"
    management: str | None = None  # "127.0.0.1:PORT"
    uds: Path | None = None  # the inference Unix socket
    state_dir: Path | None = None
    model: str = "mlp"
    management_tls: bool = True  # False: the agent runs its management API with --insecure

    def management_client(self, **options: Any) -> Any:
        """An AgentClient for the management API with the agent's token, pinning the agent's
        TLS certificate (read from its state directory) unless it runs in plaintext."""
        from edge_agent.client.agent_client import AgentClient, PinnedTls
        from edge_agent.management.tls import fingerprint_of

        assert self.management is not None and self.state_dir is not None
        token = (self.state_dir / "management.token").read_text().strip()
        tls = PinnedTls(fingerprint_of(self.state_dir)) if self.management_tls else None
        return AgentClient(self.management, token=token, tls=tls, **options)


@dataclass
class Tally:
    """Thread-safe counters an attack fills (sent, refused, errors ...)."""

    counts: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, key: str, n: int = 1) -> None:
        """Add ``n`` to ``key``."""
        with self.lock:
            self.counts[key] += n


Attack = Callable[[Target, threading.Event, Tally], None]

# name -> module (under benchmarks.attacks) defining ``attack``.
ATTACKS: dict[str, str] = {
    "fleet_forgery": "fleet_forgery",  # a hostile MQTT broker floods forged desired states
    "gives_up": "gives_up",  # 1 ms deadlines and cancelled calls: never run (issue 25)
    "grpc_idle_and_amplify": "grpc_idle_and_amplify",
    "http_hostile": "http_hostile",
    "hostile-registry": "hostile_registry",
    "large_messages": "large_messages",  # 16 x 32 MiB messages at once, without pause
    "management_lockout": "management_lockout",
    "shm_deputy": "shm_deputy",
    "typed_contents": "typed_contents",
}


def fixed_port(env: str) -> int:
    """A loopback port for a server an attack starts later but the agent is told of at its
    start: ``$env`` when set, else one free now."""
    import os
    import socket

    if os.environ.get(env):
        return int(os.environ[env])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    os.environ[env] = str(port)  # the same port in an attacker process spawned later
    return port


def agent_args(names: list[str]) -> list[str]:
    """The ``edge-agent serve`` flags the attacks ``names`` need (their ``AGENT_ARGS``)."""
    out: list[str] = []
    for name in names:
        module = importlib.import_module(f"benchmarks.attacks.{ATTACKS[name]}")
        out += list(getattr(module, "AGENT_ARGS", []))
    return out


def load(name: str) -> Attack:
    """The ``attack`` function of the registered attack ``name``."""
    module = importlib.import_module(f"benchmarks.attacks.{ATTACKS[name]}")
    fn: Attack = module.attack
    return fn


INFER = "/inference.GRPCInferenceService/ModelInfer"


def channel(address: str, *options: tuple[str, Any]) -> Any:
    """A gRPC channel to ``address`` on a connection of its own, as a hostile caller in a
    process of its own has: grpcio shares one connection between the channels of a process
    that have the same target and options, which would put an attack on the legitimate
    callers' connection."""
    import grpc

    return grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1),
                                                   *options])


def infer_until(target: Target, stop: threading.Event, tally: Tally, payload: bytes,
                kind: str) -> None:
    """Send ModelInfer wire bytes ``payload`` without pause until ``stop``; tally each answer
    as ``"{kind} CODE"`` (an answer that is not refused counts as a failure)."""
    import grpc

    with channel(target.grpc, ("grpc.max_send_message_length", 64 << 20)) as ch:
        call = ch.unary_unary(INFER)
        while not stop.is_set():
            try:
                call(payload, timeout=30)
                tally.add(f"{kind} answered (a failure)")
            except grpc.RpcError as exc:
                tally.add(f"{kind} {exc.code().name}")
