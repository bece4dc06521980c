"""Serve Python functions from the app's own process: the agent's serving core with its
front ends, no bundle and no model repository (PyTriton's ``Triton`` shape)::

    with FunctionServer(address="127.0.0.1:8001") as server:
        server.bind("linear", infer, inputs=[Tensor("x", np.float32, (4,))],
                    outputs=[Tensor("y", np.float32, (2,))], max_batch_size=64)
        server.serve()          # until SIGINT/SIGTERM

Each bound function is a Python model of the agent (``backends/python_backend.py``, PyTriton's
calling: ``backends/python_requests.py``) served in this process's threads: the dynamic
batcher, statistics, Prometheus metrics (``http=``), shared memory (over ``uds``), the
response cache (``response_cache_mib``) and the request-option rules apply as to a deployed
bundle. The state (the metrics store, the
generated entry modules) lives in a private temporary directory unless ``state_dir`` is given.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import platform
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from edge_agent.agent import (
    CoreParts,
    FrontEnds,
    StateParts,
    build_core,
    open_state,
    start_frontends,
)
from edge_agent.config import AgentConfig, GrpcConfig, HttpConfig, ModelOverrides, ModelsConfig
from edge_agent.core.dataplane import DataPlane
from edge_agent.errors import AgentError
from edge_agent.inline import registry
from edge_agent.inline.signature import BindError, Tensor, attach, make_signature
from edge_agent.server import BoundAddresses
from packager.bundle.format import CODE_DIR, check_model_name
from packager.bundle.function_signature import (
    CALLING_REQUESTS,
    FunctionSignature,
    signature_of,
)
from packager.bundle.manifest import MANIFEST_NAME, BatchingConfig, Manifest
from packager.bundle.writer import file_entries

__all__ = ["FunctionServer", "serve_command"]

log = logging.getLogger(__name__)

VERSION = 1
"""The version number a bound function is served as."""


class FunctionServer:
    """The agent's serving core and front ends in this process, serving bound functions.

    ``address``: gRPC over TCP (HOST:PORT, port 0: any free one; None: off); ``uds``: gRPC
    over a Unix socket at that path (None: off); ``http``: KServe REST and ``/metrics``
    (HOST:PORT; None: off). ``workers``: gRPC handler threads. Start it with ``with`` (or
    :meth:`start`), bind functions, then :meth:`serve` (blocks) or :meth:`run` (returns)."""

    def __init__(self, *, address: str | None = "127.0.0.1:8001",
                 uds: str | Path | None = None, http: str | None = None,
                 state_dir: str | Path | None = None, workers: int = 8,
                 max_concurrent_executions: int = 0, response_cache_mib: int = 0,
                 grace_s: float = 5.0) -> None:
        if address is None and uds is None:
            raise BindError("serve on something: give address (gRPC TCP) or uds (a Unix "
                            "socket path), or both")
        self._own_dir = state_dir is None
        root = Path(state_dir) if state_dir is not None else \
            Path(tempfile.mkdtemp(prefix="edge-inline-"))
        self.config = AgentConfig(
            state_dir=root,
            grpc=GrpcConfig(address=address, uds=Path(uds) if uds is not None else None,
                            uds_enabled=uds is not None, workers=workers),
            http=HttpConfig(listen=http),
            models=ModelsConfig(response_cache_bytes=response_cache_mib << 20,
                                max_concurrent_executions=max_concurrent_executions))
        self.grace_s = grace_s
        self._state: StateParts | None = None
        self._core: CoreParts | None = None
        self._ends: FrontEnds | None = None
        self._tokens: dict[str, str] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> BoundAddresses:
        """Open the state and bind the listeners (health NOT_SERVING until :meth:`run`)."""
        with self._lock:
            if self._ends is not None:
                return self._ends.addresses
            try:
                self._state = open_state(self.config)
                self._core = build_core(self.config, self._state)
                self._ends = start_frontends(self.config, self._state, self._core)
            except BaseException:
                self.close()
                raise
            log.info("inline server listening on %s",
                     ", ".join(self._ends.addresses.targets()))
            return self._ends.addresses

    def run(self) -> BoundAddresses:
        """Start serving (non-blocking): readiness and health report SERVING."""
        addresses = self.start()
        if not self.dataplane.ready():
            self.dataplane.load_all(only=lambda _name, _version: False)  # marks it ready
            assert self._ends is not None
            self._ends.grpc.mark_serving()
        return addresses

    def serve(self) -> None:
        """Serve until SIGINT or SIGTERM (or :meth:`stop`), then stop cleanly: the front
        ends drain, the models unload."""
        self.run()
        previous: dict[signal.Signals, Callable[[int, FrameType | None], Any] | int | None] = {}
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                previous[signum] = signal.signal(signum, lambda *_: self._stop.set())
        try:
            log.info("serving %s; stop with Ctrl-C or SIGTERM", ", ".join(self._tokens))
            while not self._stop.wait(0.5):
                pass
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self.close()

    run_forever = serve
    """The same as :meth:`serve`."""

    def stop(self) -> None:
        """Make :meth:`serve` return (from another thread or a signal handler)."""
        self._stop.set()

    def close(self) -> None:
        """Drain the front ends, unload the functions, remove the private state directory."""
        self._stop.set()
        ends, core, state = self._ends, self._core, self._state
        self._ends = self._core = self._state = None
        try:
            if ends is not None:
                ends.stop(self.grace_s)
            if core is not None:
                core.close()
            if state is not None:
                state.close()
        finally:
            for token in self._tokens.values():
                registry.release(token)
            self._tokens.clear()
            if self._own_dir:
                shutil.rmtree(self.config.state_dir, ignore_errors=True)

    def __enter__(self) -> FunctionServer:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- what it serves -----------------------------------------------------------------------
    @property
    def addresses(self) -> BoundAddresses:
        """Where it listens (``tcp`` with the real port, ``uds``, ``http``)."""
        if self._ends is None:
            raise AgentError("the inline server is not started; use `with FunctionServer()` "
                             "or call start()")
        return self._ends.addresses

    @property
    def dataplane(self) -> DataPlane:
        """The data plane serving the bound functions."""
        if self._core is None:
            raise AgentError("the inline server is not started")
        return self._core.dataplane

    def bind(self, model_name: str, infer_func: Callable[..., Any],
             inputs: Sequence[Tensor] | None = None, outputs: Sequence[Tensor] | None = None,
             *, max_batch_size: int | None = None, max_queue_delay_us: int | None = None,
             preferred_batch_sizes: Sequence[int] | None = None, instances: int | None = None,
             max_queue_size: int = 0, decoupled: bool | None = None,
             response_cache: bool = False, execution_timeout_ms: int | None = None) -> None:
        """Serve ``infer_func`` (PyTriton's calling: a list of requests, or decorated with
        ``@batch``/``@sample``) as model ``model_name`` version 1. Tensors, batching and
        ``decoupled`` not given here come from the function's ``@signature``; ``instances``:
        executions of it at once (threads). BindError when the signature is incomplete or
        wrong, AgentError subclasses when the model does not load."""
        check = _checked_name(model_name)
        if check in self._tokens:
            raise BindError(f"model {model_name!r} is bound already; bind another name")
        found = _signature(infer_func, inputs, outputs, max_batch_size=max_batch_size,
                           max_queue_delay_us=max_queue_delay_us,
                           preferred_batch_sizes=preferred_batch_sizes,
                           instances=instances, decoupled=decoupled)
        attach(infer_func, found)
        self.start()
        token = registry.register(infer_func)
        model_dir = self.config.state_dir / "inline" / model_name / str(VERSION)
        try:
            _write_model(model_dir, model_name, token, found, max_queue_size)
            repo = self.dataplane.repository
            repo.set_overrides(model_name, ModelOverrides(
                isolation="thread", warmup=False, response_cache=response_cache,
                execution_timeout_ms=execution_timeout_ms))
            repo.load_version(model_name, VERSION, model_dir=model_dir)
        except BaseException:
            registry.release(token)
            raise
        self._tokens[model_name] = token
        log.info("bound %s as model %r (max_batch_size %d%s)", infer_func, model_name,
                 found.max_batch_size, ", decoupled" if found.decoupled else "")


def _checked_name(name: str) -> str:
    try:
        return check_model_name(name)
    except AgentError:
        raise
    except Exception as exc:
        raise BindError(f"model name {name!r}: {exc}") from exc


def _signature(fn: Callable[..., Any], inputs: Sequence[Tensor] | None,
               outputs: Sequence[Tensor] | None, *, max_batch_size: int | None,
               max_queue_delay_us: int | None, preferred_batch_sizes: Sequence[int] | None,
               instances: int | None, decoupled: bool | None) -> FunctionSignature:
    """What ``bind`` was given, the rest from the function's ``@signature``."""
    base = signature_of(fn) or FunctionSignature((), ())
    if (inputs is None and not base.inputs) or (outputs is None and not base.outputs):
        raise BindError(f"bind {fn!r}: give inputs= and outputs= (lists of Tensor), or "
                        "decorate the function with @signature(inputs=..., outputs=...)")

    def pick(given: Any, declared: Any) -> Any:
        return declared if given is None else given

    return make_signature(
        pick(inputs, base.inputs), pick(outputs, base.outputs),
        max_batch_size=pick(max_batch_size, base.max_batch_size),
        decoupled=pick(decoupled, base.decoupled),
        max_queue_delay_us=pick(max_queue_delay_us, base.max_queue_delay_us),
        preferred_batch_sizes=pick(preferred_batch_sizes, base.preferred_batch_sizes),
        instances=pick(instances, base.instances))


def _write_model(model_dir: Path, name: str, token: str, found: FunctionSignature,
                 max_queue_size: int) -> None:
    """A model directory the Python backend loads: the generated entry module and a manifest
    with PyTriton's calling (unsigned: it never leaves this process)."""
    module = registry.MODULE_PREFIX + token
    code = model_dir / CODE_DIR
    code.mkdir(parents=True)
    (code / f"{module}.py").write_text(registry.entry_source(token), encoding="utf-8")
    batched = found.max_batch_size > 0
    manifest = Manifest(
        name=name, version=VERSION, profile="inline", arch=platform.machine(),
        backend="python", precision="fp32",
        inputs=found.batched(found.inputs), outputs=found.batched(found.outputs),
        batching=BatchingConfig(
            max_batch_size=found.max_batch_size,
            preferred_batch_sizes=found.preferred_batch_sizes if batched else (),
            max_queue_delay_us=found.max_queue_delay_us if batched else 0,
            instances=found.instances, max_queue_size=max_queue_size),
        artifacts={"python": f"{CODE_DIR}/{module}.py"},
        backend_options={"python": {"entry": f"{module}:infer",
                                    "calling": CALLING_REQUESTS}},
        warmup=False, decoupled=found.decoupled)
    manifest = dataclasses.replace(manifest, files=file_entries(model_dir))
    (model_dir / MANIFEST_NAME).write_bytes(manifest.canonical_bytes())


def serve_command(functions: dict[str, Callable[..., Any]], argv: Sequence[str] | None = None,
                  description: str = "") -> None:
    """A script's ``main``: serve ``functions`` (model name -> function with a ``@signature``)
    with ``--address`` (gRPC HOST:PORT, default 127.0.0.1:8001), ``--uds PATH`` and
    ``--http HOST:PORT`` from the command line; prints ``serving on TARGET...`` once ready,
    and returns on SIGINT/SIGTERM."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--address", default="127.0.0.1:8001",
                        help="gRPC HOST:PORT (port 0: any free one)")
    parser.add_argument("--uds", default=None, help="also gRPC on this Unix socket path")
    parser.add_argument("--http", default=None, help="KServe REST and /metrics on HOST:PORT")
    args = parser.parse_args(argv)
    with FunctionServer(address=args.address, uds=args.uds, http=args.http) as server:
        for name, fn in functions.items():
            server.bind(model_name=name, infer_func=fn)
        addresses = server.run()
        print("serving on", " ".join(addresses.targets()),
              f"http {addresses.http}" if addresses.http else "", flush=True)
        server.serve()
