"""A TCP proxy on 127.0.0.1 that cuts the connection after N bytes from the client (a network
cut between console and agent, for real: both sockets are closed with RST)."""

from __future__ import annotations

import select
import socket
import struct
import threading


class CuttingProxy:
    """Forwards one port to ``target``; after ``cut_after`` client bytes, resets both sides."""

    def __init__(self, target: str, cut_after: int) -> None:
        host, _, port = target.rpartition(":")
        self.target = (host, int(port))
        self.cut_after = cut_after
        self.forwarded = 0
        self.cut = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> CuttingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._listener.close()
        self._thread.join(10)

    def _serve(self) -> None:
        self._listener.settimeout(0.2)
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            upstream = socket.create_connection(self.target)
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, client: socket.socket, upstream: socket.socket) -> None:
        try:
            while not self._stop.is_set():
                ready, _, _ = select.select([client, upstream], [], [], 0.2)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    if sock is client:
                        room = self.cut_after - self.forwarded
                        upstream.sendall(data[:max(room, 0)])
                        self.forwarded += min(len(data), max(room, 0))
                        if self.forwarded >= self.cut_after:
                            self.cut.set()
                            return
                    else:
                        client.sendall(data)
        except OSError:
            return
        finally:
            for sock in (client, upstream):  # RST, like a cable pulled mid-stream
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.close()
