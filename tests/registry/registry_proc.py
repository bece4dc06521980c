"""A real OCI registry for tests: Debian's ``docker-registry`` (the CNCF distribution server)
on 127.0.0.1, a port from the OS, storage in a temp dir; stopped by the test.

Also a small TCP relay (:class:`CuttingRelay`) that can cut a transfer after N bytes and then
refuse connections, to play a registry that goes away mid-pull.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

BINARY = shutil.which("docker-registry") or (
    "/usr/bin/docker-registry" if os.path.exists("/usr/bin/docker-registry") else None)
SKIP_REASON = ("docker-registry is not installed (Debian package docker-registry; "
               "scripts/system-deps.sh installs it)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop_process_group(proc: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM a server started with ``start_new_session``, SIGKILL after 15 s; waited for."""
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=15)


class RegistryProcess:
    """One ``docker-registry serve`` with filesystem storage under ``root``."""

    def __init__(self, root: Path, *, htpasswd: str | None = None,
                 tls: tuple[Path, Path] | None = None) -> None:
        self.root = root
        self.htpasswd = htpasswd  # "user:bcrypt-hash" lines: basic auth on every call
        self.tls = tls  # (certificate, key) PEM: HTTPS
        self.storage = root / "storage"
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.log = root / "registry.log"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"

    def _context(self) -> ssl.SSLContext | None:
        return ssl.create_default_context(cafile=str(self.tls[0])) if self.tls else None

    def start(self, timeout_s: float = 60.0) -> RegistryProcess:
        assert BINARY is not None
        self.storage.mkdir(parents=True, exist_ok=True)
        for _ in range(5):  # the port may be taken between picking and binding
            self.port = free_port()
            config = self.root / "config.yml"
            config.write_text(
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n"
                f"    rootdirectory: {self.storage}\n  delete:\n    enabled: true\n"
                f"http:\n  addr: 127.0.0.1:{self.port}\n" + self._tls() + self._auth())
            with self.log.open("ab") as log:
                self.proc = subprocess.Popen([BINARY, "serve", str(config)], stdout=log,
                                             stderr=subprocess.STDOUT, start_new_session=True)
            if self._wait_ready(timeout_s):
                return self
            self.stop()
        raise AssertionError("docker-registry did not answer /v2/:\n" + self.log.read_text())

    def _tls(self) -> str:
        if self.tls is None:
            return ""
        return (f"  tls:\n    certificate: {self.tls[0]}\n    key: {self.tls[1]}\n")

    def _auth(self) -> str:
        if self.htpasswd is None:
            return ""
        path = self.root / "htpasswd"
        path.write_text(self.htpasswd + "\n")
        return f"auth:\n  htpasswd:\n    realm: test-realm\n    path: {path}\n"

    def _wait_ready(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(f"{self.scheme}://{self.address}/v2/", timeout=2,
                                            context=self._context()) as r:
                    if r.status == 200:
                        return True
            except urllib.error.HTTPError as exc:
                if exc.code == 401:  # up, and wants credentials
                    return True
            except OSError:
                time.sleep(0.1)
        return False

    def stop(self) -> None:
        stop_process_group(self.proc)

    def blob_file(self, digest: str) -> Path:
        """Where the filesystem driver keeps a blob's bytes."""
        hexd = digest.removeprefix("sha256:")
        return (self.storage / "docker/registry/v2/blobs/sha256" / hexd[:2] / hexd / "data")


class CuttingRelay:
    """A TCP relay to ``target`` on 127.0.0.1, port from the OS. Responses of the requests
    matching ``cut_path`` are cut after ``cut_after`` bytes ``cuts`` times; with
    ``die_after_cut`` the relay stops accepting (the registry "went away")."""

    def __init__(self, target: str, *, cut_after: int, cuts: int = 1,
                 die_after_cut: bool = False, cut_path: str = "/blobs/") -> None:
        host, _, port = target.rpartition(":")
        self.target = (host, int(port))
        self.cut_after, self.cuts, self.die = cut_after, cuts, die_after_cut
        self.cut_path = cut_path.encode()
        self.requests: list[bytes] = []
        self.cut_done = 0
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.port = int(self._sock.getsockname()[1])
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._clients: list[socket.socket] = []

    def arm(self, *, cut_after: int, cuts: int = 1, die_after_cut: bool = False) -> None:
        """Cut the next ``cuts`` blob downloads after ``cut_after`` bytes (then go away)."""
        with self._lock:
            self.cut_after, self.cuts, self.die, self.cut_done = cut_after, cuts, \
                die_after_cut, 0
            self.requests.clear()

    def go_away(self) -> None:
        """Refuse new connections and drop every open one."""
        self._stop.set()
        with contextlib.suppress(OSError):
            self._sock.close()
        with self._lock:
            for c in self._clients:
                with contextlib.suppress(OSError):
                    c.shutdown(socket.SHUT_RDWR)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> CuttingRelay:
        t = threading.Thread(target=self._accept, daemon=True)
        t.start()
        self._threads.append(t)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self._sock.close()
        for t in self._threads:
            t.join(timeout=10)

    def _accept(self) -> None:
        self._sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                client, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self._clients.append(client)
            t = threading.Thread(target=self._serve, args=(client,), daemon=True)
            t.start()
            self._threads.append(t)

    def _serve(self, client: socket.socket) -> None:
        upstream = socket.create_connection(self.target, timeout=30)
        with client, upstream:
            client.settimeout(30)
            state = {"cut": False, "budget": -1}

            def pump_up() -> None:
                with contextlib.suppress(OSError):
                    while data := client.recv(65536):
                        with self._lock:
                            self.requests.append(data)
                            if (self.cut_path in data.split(b"\r\n", 1)[0]
                                    and self.cut_done < self.cuts and data.startswith(b"GET")):
                                self.cut_done += 1
                                state["budget"] = self.cut_after
                        upstream.sendall(data)
                with contextlib.suppress(OSError):
                    upstream.shutdown(socket.SHUT_WR)

            up = threading.Thread(target=pump_up, daemon=True)
            up.start()
            with contextlib.suppress(OSError):
                while data := upstream.recv(65536):
                    budget = state["budget"]
                    if budget >= 0:
                        if len(data) >= budget:
                            client.sendall(data[:budget])
                            state["cut"] = True
                            break
                        state["budget"] = budget - len(data)
                    client.sendall(data)
            if state["cut"]:
                with contextlib.suppress(OSError):
                    client.shutdown(socket.SHUT_RDWR)
                if self.die:
                    self.go_away()
            up.join(timeout=5)


@contextlib.contextmanager
def running_registry(root: Path, *, htpasswd: str | None = None,
                     tls: tuple[Path, Path] | None = None) -> Iterator[RegistryProcess]:
    reg = RegistryProcess(root, htpasswd=htpasswd, tls=tls).start()
    try:
        yield reg
    finally:
        reg.stop()
