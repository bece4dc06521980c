"""Process isolation: each instance of a model runs its runtime in a process of its own.

A runtime that hangs inside an inference and cannot be cancelled (OpenVINO, TensorRT), or
that crashes (a segfault in native code), would otherwise take an instance, or the whole
agent, with it. Here ``cancel`` kills the instance's process (only while the execution it
names runs there) and the thread that ran it loads a fresh one before the instance takes its
next execution; a crash fails only the execution in flight (UNAVAILABLE: retry) and the
process is restarted in the background. Other instances and other models are not touched.

Cost: one process per instance (the runtime's own memory, once per instance) and one copy of
every tensor each way over a socketpair (docs/performance.md has the figures).
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np

from edge_agent.backends import memory_watch
from edge_agent.backends.base import (
    BackendOptions,
    Cancellation,
    Host,
    RunningExecutions,
    threads_per_instance,
)
from edge_agent.backends.ipc import Channel, WireError
from edge_agent.errors import AgentError, BackendCrashedError, BackendError, RuntimeMissingError
from packager.bundle.manifest import Manifest

log = logging.getLogger(__name__)

LOAD_TIMEOUT_S = 600.0
"""How long a runtime process may take to load its model (a TensorRT engine build is slow)."""

SHARED_REGION_BYTES = 64 * 2**20
"""Shared memory per instance and direction (pages are allocated only when touched); larger
messages travel on the socket."""


def _exit_reason(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def _close_channel(conn: Channel, mem: mmap.mmap | None) -> None:
    """Close the socket and unmap the shared memory (arrays still viewing it keep it alive)."""
    conn.close()
    with contextlib.suppress(BufferError):
        for view in (conn.outgoing, conn.incoming):
            if view is not None:
                view.release()
        if mem is not None:
            mem.close()


def load_request(model_dir: Path, manifest: Manifest, options: BackendOptions,
                 preferred: str | None) -> dict[str, Any]:
    """The first message to a runtime process: load one instance of ``manifest``'s model.

    The whole manifest travels, so the runtime compiles with the bundle's own settings (e.g.
    OpenVINO's performance hint and inference precision); each process holds one instance, so
    the cores are split here, as a runtime would split them between parallel instances.
    """
    threads = threads_per_instance(options.threads, max(1, options.instances))
    return {
        "op": "load", "model_dir": str(Path(model_dir).resolve()),
        "manifest": manifest.to_dict(), "preferred": preferred,
        "options": {"threads": threads, "device": options.device,
                    "state_dir": str(options.state_dir) if options.state_dir else None,
                    "budgeted": options.budgeted},
    }


CALL_OPS = frozenset({"call", "start", "await", "ready", "drop", "open", "pull"})
"""The messages a runtime process sends mid-execution to call other models (each answered
with one reply): ``call`` runs one request (``ctx.infer``); ``start`` begins one and
``await`` fetches its answer (``ctx.infer_async``; ``ready`` asks whether it is there);
``open`` begins a stream and ``pull`` fetches its next response (``ctx.stream``); ``drop``
forgets a started call or stream."""


class _Children:
    """The calls one runtime process's execution started on the agent, by the process's id
    for them; those still open when the execution ends are cancelled (streams closed)."""

    def __init__(self, owner: IsolatedBackend) -> None:
        self._owner = owner
        self._open: dict[int, Future[dict[str, np.ndarray]] | Iterator[dict[str, np.ndarray]]] = {}

    def answer(self, request: dict[str, Any], inputs: dict[str, np.ndarray],
               ) -> tuple[dict[str, Any], dict[str, np.ndarray] | None]:
        """The reply to one CALL_OPS message."""
        op = request.get("op")
        host = self._owner.host
        if op == "call" or host is None:
            return self._owner.call(request, inputs)
        call = int(request.get("id", 0))
        model, version = str(request.get("model")), request.get("version")
        try:
            if op == "start":
                self._open[call] = host.submit(model, inputs, version)
            elif op == "open":
                self._open[call] = host.stream(model, inputs, version)
            elif op == "await":
                future = self._open.pop(call)
                assert isinstance(future, Future)
                return {"ok": True}, future.result()
            elif op == "ready":
                started = self._open[call]
                assert isinstance(started, Future)
                return {"ok": True, "done": started.done()}, None
            elif op == "pull":
                responses = self._open[call]
                assert not isinstance(responses, Future)
                with host.waiting():
                    item = next(responses, None)
                if item is None:
                    del self._open[call]
                    return {"ok": True, "item": False}, None
                return {"ok": True, "item": True}, item
            else:  # drop
                self._forget(self._open.pop(call, None))
        except AgentError as exc:
            self._forget(self._open.pop(call, None))
            return {"ok": False, "error": str(exc)}, None
        except (KeyError, AssertionError):
            return {"ok": False, "error": f"no call {call} is open (it ended, or was never "
                                          "started)"}, None
        return {"ok": True}, None

    @staticmethod
    def _forget(child: Future[dict[str, np.ndarray]] | Iterator[dict[str, np.ndarray]] | None,
                ) -> None:
        if isinstance(child, Future):
            child.cancel()
        elif child is not None:
            close = getattr(child, "close", None)
            if close is not None:
                close()

    def close(self) -> None:
        """The execution ended: cancel what it left open."""
        while self._open:
            self._forget(self._open.popitem()[1])


class _RuntimeProcess:
    """One runtime process serving one instance; restarts itself after a kill or a crash."""

    def __init__(self, owner: IsolatedBackend, instance: int) -> None:
        self._owner = owner
        self.instance = instance
        self.proc: subprocess.Popen[bytes] | None = None
        self._conn: Channel | None = None
        self._mem: mmap.mmap | None = None
        self._restarting: threading.Thread | None = None
        self._restart_error: BaseException | None = None
        self.info: dict[str, Any] = {}
        self._over_limit = ""  # why the memory watch killed the process ("" when it did not)
        self._watch_stop = threading.Event()
        self._children = _Children(owner)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start the process and load the model in it (raises the load's error)."""
        owner = self._owner
        parent, child = socket.socketpair()
        mem, memfd = self._shared_memory()
        # the last argument only names the instance for ps/top: "mlp:1#0"
        args = [str(child.fileno()), str(os.getpid()), str(memfd if mem is not None else -1),
                str(SHARED_REGION_BYTES), f"{owner.model}:{owner.version}#{self.instance}"]
        fds = [child.fileno()]
        if mem is not None:
            fds.append(memfd)
        try:
            # a process group of its own: a stop or kill takes whatever it started with it
            proc = subprocess.Popen(
                [sys.executable, "-m", "edge_agent.backends.runtime_process", *args],
                pass_fds=fds, stdin=subprocess.DEVNULL, process_group=0)
        except OSError as exc:
            parent.close()
            if mem is not None:
                mem.close()
            raise BackendError(f"model {owner.label}: cannot start a runtime process: "
                               f"{exc}") from exc
        finally:
            child.close()
            if memfd >= 0:
                os.close(memfd)
        if owner.nice > 0:
            with contextlib.suppress(OSError):  # the process may have died already
                os.setpriority(os.PRIO_PROCESS, proc.pid, owner.nice)
        if mem is not None:
            conn = Channel(parent, outgoing=memoryview(mem)[:SHARED_REGION_BYTES],
                           incoming=memoryview(mem)[SHARED_REGION_BYTES:])
        else:
            conn = Channel(parent)
        try:
            reply = self._load(conn, proc)
        except BaseException:
            _close_channel(conn, mem)
            self._kill(proc)
            raise
        self.info = reply
        self.proc, self._conn, self._mem = proc, conn, mem
        self._over_limit = ""
        self._watch_stop = threading.Event()
        memory_watch.watch(proc.pid, owner.memory_limit_bytes, self._exceeded,
                           self._watch_stop, name=f"{owner.model}:{owner.version}#{self.instance}")

    def _exceeded(self, rss: int) -> None:
        owner = self._owner
        self._over_limit = (f"its resident memory reached {rss / 2**20:.0f} MiB, over the "
                            f"limit of {owner.memory_limit_bytes / 2**20:.0f} MiB "
                            f"([models.{owner.model}] memory_limit_mib, default the "
                            "[agent] memory budget)")
        log.error("model %s: the runtime process of instance %d is killed: %s", owner.label,
                  self.instance, self._over_limit)

    def _load(self, conn: Channel, proc: subprocess.Popen[bytes]) -> dict[str, Any]:
        """Send the load request; the process's reply, or the load's error raised."""
        owner = self._owner
        try:
            conn.send(dict(owner.load_request))
            conn.sock.settimeout(owner.load_timeout_s)
            reply, _ = conn.recv()
            conn.sock.settimeout(None)
        except TimeoutError as exc:
            raise BackendError(f"model {owner.label}: the runtime process did not load the "
                               f"model within {owner.load_timeout_s:g} s") from exc
        except (EOFError, OSError, WireError) as exc:
            self._kill(proc)
            raise BackendError(f"model {owner.label}: the runtime process died while loading "
                               f"the model ({_exit_reason(proc.returncode)})") from exc
        if not reply.get("ok"):
            error = RuntimeMissingError if reply.get("type") == "RuntimeMissingError" \
                else BackendError
            raise error(reply.get("error", "the runtime process could not load the model"))
        return reply

    @staticmethod
    def _shared_memory() -> tuple[mmap.mmap | None, int]:
        """A fresh memfd mapping (one region per direction), or None where there is no memfd."""
        create = getattr(os, "memfd_create", None)
        if create is None:  # pragma: no cover - Linux has it
            return None, -1
        fd = create("edge-agent-tensors", getattr(os, "MFD_CLOEXEC", 0))
        try:
            os.ftruncate(fd, 2 * SHARED_REGION_BYTES)
            return mmap.mmap(fd, 2 * SHARED_REGION_BYTES), fd
        except OSError:
            os.close(fd)
            return None, -1

    @staticmethod
    def _kill(proc: subprocess.Popen[bytes]) -> None:
        memory_watch.kill_group(proc.pid)  # and whatever it started
        if proc.poll() is None:
            proc.kill()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL does not fail
            log.error("runtime process %d did not exit after SIGKILL", proc.pid)

    def _restart(self) -> None:
        """Start a new process; a failure is kept for the next ``infer`` to report."""
        try:
            self.start()
            log.info("model %s: instance %d runs in a new runtime process (pid %d)",
                     self._owner.label, self.instance, self.proc.pid if self.proc else -1)
        except BaseException as exc:
            self._restart_error = exc
            log.error("model %s: restarting instance %d failed: %s",
                      self._owner.label, self.instance, exc)

    def _restart_in_background(self) -> None:
        self._restart_error = None
        self._restarting = threading.Thread(
            target=self._restart, daemon=True,
            name=f"restart-{self._owner.label}-{self.instance}")
        self._restarting.start()

    def _ensure_running(self) -> Channel:
        if self._restarting is not None:
            self._restarting.join()
            self._restarting = None
        if self._restart_error is not None:
            error, self._restart_error = self._restart_error, None
            raise BackendError(f"model {self._owner.label}: instance {self.instance} could "
                               f"not be restarted: {error}") from error
        if self._conn is None:
            if self._owner.closed:
                raise BackendError(f"model {self._owner.label} is closed")
            self.start()
        assert self._conn is not None
        return self._conn

    # ------------------------------------------------------------------ executions
    def infer(self, inputs: dict[str, np.ndarray], execution: int) -> dict[str, np.ndarray]:
        conn = self._ensure_running()
        executions = self._owner.executions
        executions.begin(self.instance, execution)
        try:
            conn.send({"op": "infer"}, inputs)
            reply, outputs = conn.recv(copy=True)
            while reply.get("op") in CALL_OPS:  # a Python model's ctx.infer, mid-execution
                conn.send(*self._children.answer(reply, outputs))
                reply, outputs = conn.recv(copy=True)
        except (EOFError, OSError, WireError) as exc:
            raise self._lost(cancelled=executions.end(self.instance)) from exc
        finally:
            self._children.close()
        if executions.end(self.instance):
            # killed just after it answered: replace the process before the next execution
            self._lost(cancelled=True)
        if not reply.get("ok"):
            raise BackendError(f"model {self._owner.label}: {reply.get('error')}")
        return outputs

    def stream(self, inputs: dict[str, np.ndarray], execution: int,
               ) -> Iterator[dict[str, np.ndarray]]:
        """A decoupled model's responses from the runtime process, one at a time (the
        process produces the next only once this one is taken); closing early stops it."""
        conn = self._ensure_running()
        executions = self._owner.executions
        executions.begin(self.instance, execution)
        done = False
        try:
            conn.send({"op": "stream"}, inputs)
            while True:
                reply, outputs = conn.recv(copy=True)
                op = reply.get("op")
                if op in CALL_OPS:  # ctx.infer from the generator
                    conn.send(*self._children.answer(reply, outputs))
                elif op == "item":
                    yield outputs
                    conn.send({"op": "next"})
                else:
                    done = True
                    break
        except (EOFError, OSError, WireError) as exc:
            done = True
            raise self._lost(cancelled=executions.end(self.instance)) from exc
        finally:
            if not done:  # the caller stopped taking responses: stop the generator
                self._stop_stream(conn)
            self._children.close()
        if executions.end(self.instance):
            self._lost(cancelled=True)
        if not reply.get("ok"):
            raise BackendError(f"model {self._owner.label}: {reply.get('error')}")

    def _stop_stream(self, conn: Channel) -> None:
        """Ask the process to close the generator and wait for its last message; a process
        that does not answer within the load timeout is replaced."""
        try:
            conn.send({"op": "stop"})
            conn.sock.settimeout(self._owner.load_timeout_s)
            while True:
                reply, _ = conn.recv(copy=True)
                if reply.get("op") in CALL_OPS:
                    conn.send({"ok": False, "error": "the stream was stopped"})
                elif reply.get("op") != "item":
                    break
            conn.sock.settimeout(None)
            if self._owner.executions.end(self.instance):
                self._lost(cancelled=True)
        except (EOFError, OSError, WireError):
            self._lost(cancelled=self._owner.executions.end(self.instance))

    def _lost(self, *, cancelled: bool) -> BackendError:
        """The process died (or was killed by ``cancel``): reap it, restart it, and say what
        happened."""
        proc, conn, mem = self.proc, self._conn, self._mem
        self.proc = self._conn = self._mem = None
        self._watch_stop.set()
        over_limit, self._over_limit = self._over_limit, ""
        if conn is not None:
            _close_channel(conn, mem)
        reason = "gone"
        if proc is not None:
            self._kill(proc)
            reason = _exit_reason(proc.returncode)
        owner = self._owner
        if owner.closed:
            pass
        elif cancelled:
            # the watchdog has answered the callers already: load the replacement on this
            # thread, which holds the instance, so that the next execution's time limit does
            # not run while it waits for the new process
            self._restart_error = None
            self._restart()
        else:  # a crash: answer the caller now, load the replacement meanwhile
            self._restart_in_background()
        if cancelled:
            return BackendError(f"model {owner.label}: the execution on instance "
                                f"{self.instance} was cancelled (runtime process killed); a new "
                                "process replaces it")
        if over_limit:
            return BackendError(f"model {owner.label}: the runtime process of instance "
                                f"{self.instance} was killed during the inference: {over_limit}; "
                                "a new process replaces it")
        log.error("model %s: the runtime process of instance %d died during an inference "
                  "(%s); restarting it", owner.label, self.instance, reason)
        return BackendCrashedError(
            f"model {owner.label}: the {owner.name} runtime process of instance "
            f"{self.instance} died during the inference ({reason}); it is being restarted, "
            "retry the request")

    def kill(self) -> None:
        """Kill the process (from another thread); a blocked ``infer`` raises."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            memory_watch.kill_group(proc.pid)

    def close(self, timeout_s: float = 10.0) -> None:
        if self._restarting is not None:
            self._restarting.join(timeout=LOAD_TIMEOUT_S)
        proc, conn, mem = self.proc, self._conn, self._mem
        self.proc = self._conn = self._mem = None
        self._watch_stop.set()
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.send({"op": "close"})
            _close_channel(conn, mem)
        if proc is not None:
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("runtime process %d of model %s did not exit; killing it",
                            proc.pid, self._owner.label)
            self._kill(proc)  # and the processes it started, which may outlive it


class IsolatedBackend:
    """A model version whose every instance runs in a runtime process of its own."""

    cancellation = Cancellation.KILL

    def __init__(self, model_dir: Path, manifest: Manifest, options: BackendOptions,
                 preferred: str | None = None, *,
                 load_timeout_s: float = LOAD_TIMEOUT_S) -> None:
        self.label = f"{manifest.name!r} version {manifest.version}"
        self.model, self.version = manifest.name, manifest.version
        self.inputs = manifest.inputs
        self.outputs = manifest.outputs
        self.closed = False
        self.load_timeout_s = load_timeout_s
        self.nice = options.nice  # of every runtime process (a background model's: above 0)
        self.memory_limit_bytes = options.memory_limit_bytes  # of each process (0: none)
        self.host: Host | None = options.host  # answers the processes' nested calls
        instances = max(1, options.instances)
        self.load_request = load_request(model_dir, manifest, options, preferred)
        self.executions = RunningExecutions(instances)
        self._instances = [_RuntimeProcess(self, i) for i in range(instances)]
        t0 = time.monotonic()
        errors: list[BaseException] = []

        def start(p: _RuntimeProcess) -> None:
            try:
                p.start()
            except BaseException as exc:
                errors.append(exc)

        starters = [threading.Thread(target=start, args=(p,), daemon=True)
                    for p in self._instances]
        for t in starters:
            t.start()
        for t in starters:
            t.join()
        if errors:
            self.close()
            raise errors[0]
        info = self._instances[0].info
        self.name = str(info.get("name", "unknown"))
        self.device = str(info.get("device", "unknown"))
        log.info("model %s: %d runtime process(es) on %s/%s ready in %.2f s", self.label,
                 len(self._instances), self.name, self.device, time.monotonic() - t0)

    def call(self, request: dict[str, Any], inputs: dict[str, np.ndarray],
             ) -> tuple[dict[str, Any], dict[str, np.ndarray] | None]:
        """Run a runtime process's request on another model (``ctx.infer``) on the host this
        model was loaded with; the reply to send back (the process's model names the call
        in its error)."""
        model = str(request.get("model"))
        if self.host is None:
            return {"ok": False, "error": f"no agent hosts model {self.label}"}, None
        try:
            outputs = self.host.infer(model, inputs, request.get("version"))
        except AgentError as exc:
            return {"ok": False, "error": str(exc)}, None
        return {"ok": True}, outputs

    @property
    def pids(self) -> list[int]:
        """The runtime processes' pids (0 for an instance being restarted)."""
        return [p.proc.pid if p.proc is not None else 0 for p in self._instances]

    def infer(self, inputs: dict[str, np.ndarray], instance: int = 0,
              execution: int = 0) -> dict[str, np.ndarray]:
        """Run one execution in ``instance``'s runtime process."""
        return self._instances[instance].infer(inputs, execution)

    def stream(self, inputs: dict[str, np.ndarray], instance: int = 0,
               execution: int = 0) -> Iterator[dict[str, np.ndarray]]:
        """A decoupled model's responses, produced in ``instance``'s runtime process."""
        return self._instances[instance].stream(inputs, execution)

    def cancel(self, instance: int, execution: int) -> bool:
        """Stop ``execution`` if it runs on ``instance`` now by killing the instance's process;
        a new one replaces it."""
        if not 0 <= instance < len(self._instances):
            return False
        return self.executions.cancel(instance, execution, self._instances[instance].kill)

    def close(self) -> None:
        """Stop every runtime process. Idempotent."""
        if self.closed:
            return
        self.closed = True
        for p in self._instances:
            p.close()
