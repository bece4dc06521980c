"""The runtime process: one model instance served to the agent over a socketpair.

Started by :mod:`edge_agent.backends.isolated` as
``python -m edge_agent.backends.runtime_process FD PARENT_PID MEMFD REGION_BYTES NAME`` (the
socket to the agent, the shared memory tensors travel in (:mod:`edge_agent.backends.ipc`), and
the instance's name for ps/top).
The first message loads the model (``{"op": "load", ...}``); each later message is one
execution. The process dies with its parent (a watcher thread) and exits when the socket
closes, so a killed agent leaves no runtime behind.
"""

from __future__ import annotations

import contextlib
import itertools
import mmap
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edge_agent.backends.ipc import Channel

if TYPE_CHECKING:
    from edge_agent.backends.base import Backend, Host, HostedModel

_POLL_S = 0.002
"""How often a watched call asks the agent whether its answer is there."""


def _end_group() -> None:
    """Exit with every process this one started (it leads a process group of its own)."""
    if os.getpgid(0) == os.getpid():
        os.killpg(0, signal.SIGKILL)
    os._exit(1)


def _die_with_parent(parent_pid: int, period_s: float = 1.0) -> None:
    """Exit as soon as the agent is gone, even in the middle of a hung inference.

    A watcher thread rather than PR_SET_PDEATHSIG: that signal fires when the *thread* that
    started this process ends, and the agent starts runtime processes from short-lived threads.
    Runtimes release the GIL while they compute, so the watcher runs during a hang too.
    """
    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(period_s)
        _end_group()

    if os.getppid() != parent_pid:
        _end_group()
    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


def load(request: dict[str, Any], host: Host | None = None) -> Backend:
    """Load the backend a load request names, with the one instance this process serves;
    ``host`` answers its nested calls."""
    from edge_agent.backends.base import BackendOptions
    from edge_agent.backends.registry import load_backend
    from packager.bundle.manifest import Manifest

    opts = request["options"]
    options = BackendOptions(threads=int(opts["threads"]), instances=1,
                             device=opts.get("device"),
                             state_dir=Path(opts["state_dir"]) if opts.get("state_dir") else None,
                             budgeted=bool(opts.get("budgeted", False)), host=host)
    manifest = Manifest.from_dict(request["manifest"])
    return load_backend(Path(request["model_dir"]), manifest, options,
                        preferred=request.get("preferred"))


class AgentHost:
    """The :class:`~edge_agent.backends.base.Host` of a runtime process: a nested request is
    sent to the agent in the middle of an execution (the agent answers it on its side's host
    before it expects this execution's result). ``submit`` and ``stream`` start the call on
    the agent and fetch its answers when they are asked for (``{"op": "await"}``,
    ``{"op": "pull"}``), so the wire stays one reply per message."""

    def __init__(self, conn: Channel) -> None:
        self._conn = conn
        self._lock = threading.Lock()  # one exchange on the socket at a time
        self._ids = itertools.count(1)
        self.execution = 0  # bumped when an execution's result is sent: its calls are over

    def send(self, header: dict[str, Any], outputs: dict[str, Any] | None = None,
             ack: bool = False) -> dict[str, Any] | None:
        """Send an execution's message to the agent (a response, with ``ack`` its reply is
        returned; the result, which ends the execution) in turn with the calls' exchanges."""
        with self._lock:
            if not ack:
                self.execution += 1
            self._conn.send(header, outputs)
            return self._conn.recv()[0] if ack else None

    def _ask(self, header: dict[str, Any],
             inputs: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        """Send one request to the agent and return its reply; BackendError when refused."""
        from edge_agent.errors import BackendError

        with self._lock:
            self._conn.send(header, inputs)
            reply, answer = self._conn.recv(copy=True)
        if not reply.get("ok"):
            raise BackendError(str(reply.get("error", "the agent refused the call")))
        return reply, answer

    def infer(self, model: str, inputs: dict[str, Any], version: int | None = None,
              outputs: list[str] | None = None) -> dict[str, Any]:
        """One request to ``model`` on the agent; BackendError with the agent's reason."""
        _, answer = self._ask({"op": "call", "model": model, "version": version}, inputs)
        return answer if outputs is None else {k: answer[k] for k in outputs}

    def submit(self, model: str, inputs: dict[str, Any], version: int | None = None,
               outputs: list[str] | None = None) -> Future[dict[str, Any]]:
        """Start one request on the agent; its answer is fetched when the future is waited
        for."""
        call = next(self._ids)
        self._ask({"op": "start", "id": call, "model": model, "version": version}, inputs)
        return _Remote(self, call, outputs)

    def fetch(self, call: int) -> dict[str, Any]:
        """The answer to started call ``call`` (waits for it on the agent)."""
        return self._ask({"op": "await", "id": call})[1]

    def ready(self, call: int, execution: int) -> bool | None:
        """Whether started call ``call`` has its answer on the agent (None: the execution
        that started it has ended, nothing was asked)."""
        with self._lock:
            if execution != self.execution:
                return None
            self._conn.send({"op": "ready", "id": call})
            reply, _ = self._conn.recv()
        return bool(reply.get("done", True))

    def drop(self, call: int, execution: int | None = None) -> None:
        """The agent forgets call ``call`` (cancels it if it still waits); nothing is sent
        once ``execution``, the one that started it, has ended (the agent cancelled it)."""
        if execution is not None and execution != self.execution:
            return
        self._ask({"op": "drop", "id": call})

    def stream(self, model: str, inputs: dict[str, Any],
               version: int | None = None) -> Iterator[dict[str, Any]]:
        """The responses of ``model`` on the agent, each fetched when it is taken."""
        call = next(self._ids)
        self._ask({"op": "open", "id": call, "model": model, "version": version}, inputs)
        ended = False
        try:
            while True:
                try:
                    reply, answer = self._ask({"op": "pull", "id": call})
                except Exception:
                    ended = True  # the agent closed the stream with its error
                    raise
                if not reply.get("item"):
                    ended = True
                    return
                yield answer
        finally:
            if not ended:  # left early: the agent stops the model's generator
                self.drop(call)

    def waiting(self) -> contextlib.AbstractContextManager[None]:
        """Nothing to give up here: the agent's side waits without its slot."""
        return contextlib.nullcontext()

    def model_config(self, model: str, version: int | None = None) -> HostedModel:
        """Not offered to a runtime process (only in-agent backends check other models)."""
        from edge_agent.errors import BackendError

        raise BackendError(f"model {model!r}: a runtime process cannot read another model's "
                           "configuration; load this backend in the agent's process")


class _Remote(Future[dict[str, Any]]):
    """A call started on the agent from a runtime process: waiting for it fetches its
    answer; a cancel drops it on the agent. ``done()`` is False until it is waited for,
    unless a done-callback is added (as ``asyncio.wrap_future`` does): then a thread asks
    the agent every few milliseconds whether the answer is there and fetches it."""

    def __init__(self, host: AgentHost, call: int, outputs: list[str] | None) -> None:
        super().__init__()
        self._host, self._call, self._outputs = host, call, outputs
        self._execution = host.execution
        self._fetching = threading.Lock()
        self._watched = False

    def add_done_callback(self, fn: Callable[[Future[dict[str, Any]]], object]) -> None:
        super().add_done_callback(fn)
        with self._fetching:
            if self._watched or self.done() or self.running():
                return
            self._watched = True
        threading.Thread(target=self._watch, name=f"edge-call-{self._call}",
                         daemon=True).start()

    def _watch(self) -> None:
        while not self.done():
            try:
                ready = self._host.ready(self._call, self._execution)
            except Exception:
                ready = True  # fetching tells what went wrong
            if ready is None:  # the execution ended without waiting for it: the agent
                super().cancel()  # cancelled it; nothing more may be sent for it
                return
            if ready:
                self._fetch()
                return
            time.sleep(_POLL_S)

    def _fetch(self) -> None:
        with self._fetching:
            if self.done() or self.running() or not self.set_running_or_notify_cancel():
                return
        try:
            answer = self._host.fetch(self._call)
        except BaseException as exc:
            self.set_exception(exc)
            return
        outputs = self._outputs
        self.set_result(answer if outputs is None else {k: answer[k] for k in outputs})

    def result(self, timeout: float | None = None) -> dict[str, Any]:
        self._fetch()
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._fetch()
        return super().exception(timeout)

    def cancel(self) -> bool:
        cancelled = super().cancel()
        if cancelled:
            with contextlib.suppress(Exception):  # the execution may have ended
                self._host.drop(self._call, self._execution)
        return cancelled


def _stream(host: AgentHost, backend: Any, inputs: dict[str, Any]) -> None:
    """Run a decoupled model's generator: each response is sent as ``{"op": "item"}`` and the
    next one is produced only when the agent has read it (``{"op": "next"}``; ``"stop"`` ends
    the generator early); the last message is ``{"ok": ...}`` as for an execution."""
    try:
        produced = backend.stream(inputs, 0)
        for outputs in produced:
            ack = host.send({"op": "item"}, outputs, ack=True)
            if ack is None or ack.get("op") != "next":
                produced.close()
                break
    except Exception as exc:
        host.send({"ok": False, "error": str(exc), "type": type(exc).__name__})
        return
    host.send({"ok": True})


def serve(conn: Channel) -> int:
    """Load the model the first message names, then run executions until the socket closes."""
    try:
        request, _ = conn.recv()
    except EOFError:
        return 0
    host = AgentHost(conn)
    try:
        backend = load(request, host)
    except Exception as exc:  # reported to the agent, which raises it as the load error
        conn.send({"ok": False, "error": str(exc), "type": type(exc).__name__})
        return 1
    conn.send({"ok": True, "name": backend.name, "device": backend.device,
                        "pid": os.getpid()})
    # a Python model's inputs are copied out of shared memory: the answer to a ctx.infer
    # arrives there while the function still reads them
    copy = bool(getattr(backend, "calls_host", False))
    while True:
        try:
            request, inputs = conn.recv(copy=copy)
        except EOFError:
            break
        if request.get("op") == "close":
            break
        if request.get("op") == "stream":
            _stream(host, backend, inputs)
            continue
        try:
            outputs = backend.infer(inputs, 0)
        except Exception as exc:
            host.send({"ok": False, "error": str(exc), "type": type(exc).__name__})
            continue
        host.send({"ok": True}, outputs)
    backend.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``FD PARENT_PID MEMFD REGION_BYTES NAME`` (MEMFD -1: no shared memory;
    NAME, e.g. ``mlp:1#0``, only labels the process for ps/top)."""
    args = sys.argv[1:] if argv is None else argv
    fd, parent_pid, memfd, size = (int(a) for a in args[:4])
    from_agent = to_agent = None
    if memfd >= 0:
        mem = mmap.mmap(memfd, 2 * size)
        os.close(memfd)
        from_agent, to_agent = memoryview(mem)[:size], memoryview(mem)[size:]
    _die_with_parent(parent_pid)
    # the agent decides when this process ends (a group-wide SIGTERM from systemd or a shell
    # must not kill it while the agent still drains requests); it exits when the agent closes
    # the socket or dies
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return serve(Channel(socket.socket(fileno=fd), outgoing=to_agent, incoming=from_agent))


if __name__ == "__main__":
    sys.exit(main())
