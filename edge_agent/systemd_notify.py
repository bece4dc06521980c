"""systemd readiness and watchdog notifications (the sd_notify protocol), written by hand.

The protocol is small: send newline-separated ``KEY=VALUE`` lines as one datagram to the
``AF_UNIX``/``SOCK_DGRAM`` socket named by ``$NOTIFY_SOCKET`` (a leading ``@`` names an abstract
socket). Everything here is a no-op when the agent does not run under systemd, so the agent calls
it unconditionally.

Wiring::

    notifier = SystemdNotifier()            # reads NOTIFY_SOCKET / WATCHDOG_USEC / WATCHDOG_PID
    notifier.start_watchdog(healthy=...)    # pings WATCHDOG=1 every WATCHDOG_USEC/2 while healthy
    notifier.ready("serving 3 models")      # after the gRPC servers listen
    ...
    notifier.stopping()                     # first thing on SIGTERM
    notifier.stop_watchdog()
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Mapping

log = logging.getLogger(__name__)


def _socket_address(raw: str) -> str | None:
    """The address to ``sendto`` for a ``$NOTIFY_SOCKET`` value, or None if unsupported."""
    if raw.startswith("@"):
        return "\0" + raw[1:]  # abstract namespace socket
    if raw.startswith("/"):
        return raw
    return None  # e.g. "vsock:..." (VM guests): not supported, treated as unset


class SystemdNotifier:
    """Sends sd_notify messages to systemd; does nothing when ``NOTIFY_SOCKET`` is unset.

    ``env`` defaults to ``os.environ`` (read once, at construction).
    """

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        env = os.environ if env is None else env
        raw = env.get("NOTIFY_SOCKET", "")
        self._address = _socket_address(raw) if raw else None
        if raw and self._address is None:
            log.warning("NOTIFY_SOCKET=%r is not a unix socket path; systemd notify disabled", raw)
        self._watchdog_usec = _watchdog_usec(env)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def enabled(self) -> bool:
        """True when there is a notification socket to talk to."""
        return self._address is not None

    @property
    def watchdog_interval_s(self) -> float | None:
        """How often to ping the watchdog (half of ``WATCHDOG_USEC``), or None if not enabled."""
        if self._address is None or not self._watchdog_usec:
            return None
        return self._watchdog_usec / 2 / 1_000_000

    def notify(self, *lines: str) -> bool:
        """Send ``KEY=VALUE`` lines as one datagram; True if sent. Never raises on socket errors."""
        if self._address is None:
            return False
        payload = "\n".join(lines).encode()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.sendto(payload, self._address)
        except OSError as exc:
            log.warning("systemd notify failed: %s", exc)
            return False
        return True

    def ready(self, status: str | None = None) -> bool:
        """Tell systemd the service is up (``READY=1``), with an optional status line."""
        return self.notify("READY=1", *([f"STATUS={_one_line(status)}"] if status else []))

    def status(self, text: str) -> bool:
        """Set the free-form status shown by ``systemctl status``."""
        return self.notify(f"STATUS={_one_line(text)}")

    def stopping(self, status: str | None = None) -> bool:
        """Tell systemd the service is shutting down (``STOPPING=1``)."""
        return self.notify("STOPPING=1", *([f"STATUS={_one_line(status)}"] if status else []))

    def watchdog(self) -> bool:
        """Ping the watchdog once (``WATCHDOG=1``)."""
        return self.notify("WATCHDOG=1")

    def start_watchdog(self, healthy: Callable[[], bool] | None = None) -> bool:
        """Start a daemon thread pinging the watchdog at half of ``WATCHDOG_USEC``.

        ``healthy`` (optional) is called before each ping; when it returns False (or raises)
        the ping is skipped, so systemd restarts a wedged agent. Returns False (and starts
        nothing) when the watchdog is not enabled for this process.
        """
        interval = self.watchdog_interval_s
        if interval is None:
            return False
        with self._lock:
            if self._thread is not None:
                return True
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._ping_loop, args=(interval, healthy),
                name="edge-systemd-watchdog", daemon=True)
            self._thread.start()
        return True

    def stop_watchdog(self, timeout: float = 5.0) -> None:
        """Stop the watchdog thread (if running) and wait for it."""
        with self._lock:
            thread, self._thread = self._thread, None
        self._stop.set()
        if thread is not None:
            thread.join(timeout)

    def _ping_loop(self, interval: float, healthy: Callable[[], bool] | None) -> None:
        while True:
            ok = True
            if healthy is not None:
                try:
                    ok = bool(healthy())
                except Exception:  # a failing health check must not kill the pinger
                    log.exception("watchdog health check raised")
                    ok = False
            if ok:
                self.watchdog()
            if self._stop.wait(interval):
                return


def _watchdog_usec(env: Mapping[str, str]) -> int:
    """``WATCHDOG_USEC`` if it is set for this very process (``WATCHDOG_PID``), else 0."""
    pid = env.get("WATCHDOG_PID")
    if pid and pid.strip() != str(os.getpid()):
        return 0
    try:
        usec = int(env.get("WATCHDOG_USEC", "0"))
    except ValueError:
        return 0
    return max(usec, 0)


def _one_line(text: str) -> str:
    return " ".join(text.split())
