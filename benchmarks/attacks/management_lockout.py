"""Management lockout without a token (issue 27): 1,000 silent TCP connections to the
management port from one address (127.0.0.2), re-opened as the agent closes them, so that an
agent with one global connection cap has no room left for the operator.

:class:`SilentConnections` is also what ``tests/security/test_abuse_management_lockout.py``
and ``benchmarks/bench_management.py --lockout`` hold against an agent.
"""

from __future__ import annotations

import errno
import selectors
import socket
import threading
import time

from benchmarks.attacks import Tally, Target

HOSTILE_SOURCE = "127.0.0.2"
"""The attacker's address: another loopback address than the operator's 127.0.0.1."""
CONNECTIONS = 1000


class SilentConnections:
    """Holds up to ``n`` TCP connections from ``source`` to ``target`` (HOST:PORT) that never
    send a byte; every ``reopen_s`` the ones the agent closed (or refused) are opened again.
    Counters: ``opened`` (connects started), ``closed`` (by the agent), ``held`` (now).
    A context manager; :meth:`stop` closes every socket."""

    def __init__(self, target: str, n: int = CONNECTIONS, *, source: str = HOSTILE_SOURCE,
                 reopen_s: float = 0.5) -> None:
        host, _, port = target.rpartition(":")
        self.address = (host.strip("[]"), int(port))
        self.n, self.source, self.reopen_s = n, source, reopen_s
        self.opened = self.closed = 0
        self._selector = selectors.DefaultSelector()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="silent-connections",
                                        daemon=True)

    @property
    def held(self) -> int:
        """Connections open now (connected or connecting)."""
        return len(self._selector.get_map())

    def _open(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind((self.source, 0))
            sock.setblocking(False)
            code = sock.connect_ex(self.address)
        except OSError:
            sock.close()
            return
        if code not in (0, errno.EINPROGRESS):
            sock.close()
            self.closed += 1
            return
        self.opened += 1
        self._selector.register(sock, selectors.EVENT_READ)

    def _run(self) -> None:
        next_open = 0.0
        while not self._stop.is_set():
            now = time.monotonic()
            if now >= next_open:
                for _ in range(self.n - self.held):
                    self._open()
                next_open = now + self.reopen_s
            for key, _ in self._selector.select(timeout=0.1):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    data = sock.recv(4096)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:  # closed by the agent (or refused): re-opened later
                    self._selector.unregister(sock)
                    sock.close()
                    self.closed += 1

    def start(self) -> SilentConnections:
        """Open the connections (on a thread of their own) and keep them open."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Close every connection."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)
        for key in list(self._selector.get_map().values()):
            if isinstance(key.fileobj, socket.socket):
                key.fileobj.close()
        self._selector.close()

    def __enter__(self) -> SilentConnections:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def attack(target: Target, stop: threading.Event, tally: Tally) -> None:
    """Hold :data:`CONNECTIONS` silent connections to the management port until ``stop``."""
    if target.management is None:
        tally.add("skipped: no management port")
        return
    with SilentConnections(target.management) as held:
        while not stop.wait(1.0):
            pass
        tally.add("opened", held.opened)
        tally.add("closed by the agent", held.closed)
