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


@dataclass(frozen=True)
class Target:
    """Where the agent under attack listens (all loopback)."""

    grpc: str  # "127.0.0.1:PORT"
    http: str | None = None  # "127.0.0.1:PORT"
    management: str | None = None  # "127.0.0.1:PORT"
    uds: Path | None = None  # the inference Unix socket
    state_dir: Path | None = None
    model: str = "mlp"


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
    "gives_up": "gives_up",  # 1 ms deadlines and cancelled calls: never run (issue 25)
}


def load(name: str) -> Attack:
    """The ``attack`` function of the registered attack ``name``."""
    module = importlib.import_module(f"benchmarks.attacks.{ATTACKS[name]}")
    fn: Attack = module.attack
    return fn
