"""A real MQTT broker for tests and benchmarks: Debian's ``mosquitto`` on 127.0.0.1, a port
from the OS, a generated config (anonymous, no persistence), stopped by the caller."""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from tests.registry.registry_proc import free_port, stop_process_group

BINARY = shutil.which("mosquitto") or (
    "/usr/sbin/mosquitto" if os.path.exists("/usr/sbin/mosquitto") else None)
SKIP_REASON = ("mosquitto is not installed (Debian package mosquitto; scripts/system-deps.sh "
               "installs it)")


class Mosquitto:
    """One ``mosquitto -c CONFIG`` listening on 127.0.0.1 only; ``tls`` (certificate, key)
    makes it mqtts://; ``extra`` adds config lines (an ACL)."""

    def __init__(self, root: Path, extra: str = "", tls: tuple[Path, Path] | None = None,
                 port: int = 0) -> None:
        """``port`` 0: one from the OS."""
        self.root = root
        self.fixed_port = port
        self.tls = tls
        self.extra = extra
        if tls is not None:
            self.extra += f"certfile {tls[0]}\nkeyfile {tls[1]}\n"
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = root / "mosquitto.log"

    @property
    def url(self) -> str:
        return f"{'mqtts' if self.tls else 'mqtt'}://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0) -> Mosquitto:
        assert BINARY is not None
        self.root.mkdir(parents=True, exist_ok=True)
        for _ in range(5):  # the port may be taken between picking and binding
            self.port = self.fixed_port or free_port()
            config = self.root / "mosquitto.conf"
            # as root mosquitto would drop to the user "mosquitto", who cannot read our files
            anonymous = "" if "allow_anonymous" in self.extra else "allow_anonymous true\n"
            config.write_text(f"user {getpass.getuser()}\n"
                              f"listener {self.port} 127.0.0.1\n{anonymous}"
                              "persistence false\nmax_queued_messages 100000\n"
                              f"log_dest stderr\n{self.extra}")
            with self.log.open("ab") as log:
                self.proc = subprocess.Popen([BINARY, "-c", str(config)], stdout=log,
                                             stderr=subprocess.STDOUT, start_new_session=True)
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline and self.proc.poll() is None:
                with contextlib.suppress(OSError), \
                        socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return self
                time.sleep(0.05)
            self.stop()
        raise AssertionError("mosquitto did not start:\n" + self.log.read_text())

    def stop(self) -> None:
        stop_process_group(self.proc)


@contextlib.contextmanager
def running_mosquitto(root: Path, extra: str = "", tls: tuple[Path, Path] | None = None
                      ) -> Iterator[Mosquitto]:
    """A started broker, stopped on exit."""
    broker = Mosquitto(root, extra, tls).start()
    try:
        yield broker
    finally:
        broker.stop()
