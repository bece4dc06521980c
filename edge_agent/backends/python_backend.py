"""Python-function models: ``fn(inputs, ctx) -> outputs`` over numpy arrays, from the bundle.

The bundle carries the model's source files under ``code/`` (their hashes are in the signed
manifest; the agent refuses a code bundle without a trusted signature). ``load`` checks that
the distributions in ``requires`` are installed and that the entry function imports, then
``infer`` calls it with the whole batch. The plugin declares no cancellation (Python code cannot
be stopped from outside), so ``isolation = "auto"`` runs each instance in a runtime process of
its own: a hung function is killed at the execution timeout and its process replaced, a crash
fails only the execution in flight.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import importlib.metadata
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, InvalidStateError
from pathlib import Path
from typing import Any

import numpy as np

from edge_agent.backends.base import (
    BackendOptions,
    BackendPlugin,
    Cancellation,
    Host,
    artifact_path,
)
from edge_agent.backends.python_requests import requests_calling, requests_streaming
from edge_agent.errors import AgentError, BackendError
from packager.bundle.backend_options import PythonOptions
from packager.bundle.datatypes import numpy_dtype
from packager.bundle.function_signature import CALLING_CONTEXT, CALLING_REQUESTS
from packager.bundle.manifest import Manifest

NAME = "python"

_import_lock = threading.Lock()
_imported: set[str] = set()  # top-level module names of Python models imported here


class ModelContext:
    """What a Python model's function gets besides its inputs: its name, version, a logger,
    and ``infer``, ``infer_async`` and ``stream`` to call other models on the agent (Business
    Logic Scripting) through the host the backend was loaded with. A stateful model's (spec
    ``[sequence]``) also gets its request's ``sequence_id`` (an int, or the string a caller
    sent), ``sequence_start``, ``sequence_end`` and ``state``: a dict kept for the sequence
    from its START, dropped when it ends or idles out."""

    def __init__(self, name: str, version: int, host: Host | None = None,
                 label: str = "") -> None:
        self.model_name = name
        self.model_version = version
        self.sequence_id: int | str | None = None
        self.sequence_start = False
        self.sequence_end = False
        self.state: dict[str, Any] = {}
        self.logger = logging.getLogger(f"edge_agent.models.{name}")
        self._host = host
        self._label = label or f"model {name!r} version {version}"

    def infer(self, model: str, inputs: dict[str, np.ndarray],
              version: int | None = None) -> dict[str, np.ndarray]:
        """Run ``inputs`` on ``model`` (its active version, or ``version``) through that
        model's batcher, as a request from a client would; BackendError when it fails."""
        if self._host is None:
            raise BackendError(f"{self._label}: ctx.infer({model!r}) needs the agent's data "
                               "plane, and no agent hosts this model")
        try:
            return self._host.infer(model, dict(inputs), version)
        except AgentError as exc:
            raise BackendError(f"{self._label}: ctx.infer({model!r}) failed: {exc}") from exc

    def infer_async(self, model: str, inputs: dict[str, np.ndarray],
                    version: int | None = None) -> Future[dict[str, np.ndarray]]:
        """Start ``ctx.infer(model, inputs, version)`` and return at once: a
        ``concurrent.futures.Future`` of its outputs (``result()`` raises BackendError when it
        fails; in async code, ``await asyncio.wrap_future(f)``). Several started before the
        first is awaited run side by side. Take every result before the function returns:
        the calls still running then are cancelled."""
        host = self._hosting(f"ctx.infer_async({model!r})")
        try:
            started = host.submit(model, dict(inputs), version)
        except AgentError as exc:
            raise BackendError(f"{self._label}: ctx.infer_async({model!r}) failed: "
                               f"{exc}") from exc
        return _Relabelled(started, f"{self._label}: ctx.infer_async({model!r}) failed")

    def stream(self, model: str, inputs: dict[str, np.ndarray],
               version: int | None = None) -> Iterator[dict[str, np.ndarray]]:
        """The responses of decoupled ``model`` to ``inputs``, each as the model yields it (a
        model that is not decoupled gives its one answer); BackendError when it fails.
        Leaving the loop early stops the model's generator."""
        host = self._hosting(f"ctx.stream({model!r})")
        responses = host.stream(model, dict(inputs), version)
        try:
            yield from responses
        except AgentError as exc:
            raise BackendError(f"{self._label}: ctx.stream({model!r}) failed: {exc}") from exc
        finally:
            close = getattr(responses, "close", None)
            if close is not None:
                close()

    def _hosting(self, call: str) -> Host:
        if self._host is None:
            raise BackendError(f"{self._label}: {call} needs the agent's data plane, and no "
                               "agent hosts this model")
        return self._host


class _Relabelled(Future[dict[str, np.ndarray]]):
    """A nested call's future whose failure is a BackendError naming the calling model."""

    def __init__(self, started: Future[dict[str, np.ndarray]], label: str) -> None:
        super().__init__()
        self._started = started
        self._label = label
        started.add_done_callback(self._settle)
        self.add_done_callback(self._forward_cancel)

    def _settle(self, started: Future[dict[str, np.ndarray]]) -> None:
        if self.done():
            return
        try:
            outputs = started.result()
        except BaseException as exc:
            error = exc if not isinstance(exc, AgentError) else \
                BackendError(f"{self._label}: {exc}")
            with contextlib.suppress(InvalidStateError):
                self.set_exception(error)
            return
        with contextlib.suppress(InvalidStateError):
            self.set_result(outputs)

    def _forward_cancel(self, _: Future[dict[str, np.ndarray]]) -> None:
        if self.cancelled():
            self._started.cancel()

    def result(self, timeout: float | None = None) -> dict[str, np.ndarray]:
        """The outputs, once the call is answered (the host's future does the waiting: it
        gives the execution's slot up meanwhile, or fetches the answer from the agent)."""
        if not self.done():
            self._started.exception(timeout)
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The call's error (None when it succeeded), once it is answered."""
        if not self.done():
            self._started.exception(timeout)
        return super().exception(timeout)


def check_requires(manifest: Manifest, requires: list[str]) -> None:
    """BackendError naming the first distribution in ``requires`` not installed here."""
    missing = []
    for dist in requires:
        try:
            importlib.metadata.distribution(dist)
        except importlib.metadata.PackageNotFoundError:
            missing.append(dist)
    if missing:
        raise BackendError(
            f"model {manifest.name!r} version {manifest.version} requires the distribution(s) "
            f"{', '.join(missing)}, not installed on this device; install them "
            f"(pip install {' '.join(missing)}) and deploy again")


def import_entry(model_dir: Path, manifest: Manifest, entry: str) -> Callable[..., Any]:
    """Import ``module:function`` from the bundle's code directory; BackendError when the
    module does not import or has no such callable."""
    module_name, func_name = entry.split(":")
    entry_file = artifact_path(model_dir, manifest, NAME)
    code_dir = entry_file.parents[len(module_name.split(".")) - 1]
    label = f"model {manifest.name!r} version {manifest.version}"
    top = module_name.split(".")[0]
    with _import_lock:
        if top in sys.modules and top not in _imported:
            raise BackendError(f"{label}: its entry module {module_name!r} has the name of a "
                               f"module the agent already uses ({top!r}); rename it")
        _imported.add(top)
        sys.path.insert(0, str(code_dir))
        try:
            for loaded in [m for m in sys.modules if m == top or m.startswith(top + ".")]:
                del sys.modules[loaded]  # another version of this model, in this process
            module = importlib.import_module(module_name)
        except Exception as exc:
            raise BackendError(f"{label}: its entry module {module_name!r} does not import: "
                               f"{type(exc).__name__}: {exc}") from exc
        finally:
            sys.path.remove(str(code_dir))
    fn = getattr(module, func_name, None)
    if not callable(fn):
        raise BackendError(f"{label}: module {module_name!r} has no function {func_name!r} "
                           f"(entry {entry!r})")
    return fn  # type: ignore[no-any-return]  # checked callable


class PythonBackend:
    """One loaded Python-function model version."""

    name = NAME
    cancellation = Cancellation.NONE
    device = "python"
    calls_host = True
    """``ctx.infer`` may call the host during an execution (a runtime process then keeps its
    inputs out of the shared memory the nested answer arrives in)."""

    def __init__(self, model_dir: Path, manifest: Manifest, options: BackendOptions) -> None:
        opts = PythonOptions.of(manifest)
        entry = opts.entry
        if entry.count(":") != 1:
            raise BackendError(f"model {manifest.name!r}: backend_options.python.entry "
                               f"{entry!r} is not 'module:function'")
        check_requires(manifest, [str(r) for r in opts.requires])
        self._fn = import_entry(Path(model_dir), manifest, entry)
        if opts.calling == CALLING_REQUESTS:  # PyTriton's calling: a list of requests
            batched = manifest.batching.max_batch_size > 0
            self._fn = (requests_streaming if manifest.decoupled
                        else requests_calling)(self._fn, batched)
        elif opts.calling != CALLING_CONTEXT:
            raise BackendError(f"model {manifest.name!r}: backend_options.python.calling "
                               f"{opts.calling!r} is not {CALLING_CONTEXT!r} or "
                               f"{CALLING_REQUESTS!r}; rebuild it with this edge-pack")
        self._label = f"model {manifest.name!r} version {manifest.version}"
        self._entry = entry
        self._ctx = ModelContext(manifest.name, manifest.version, options.host, self._label)
        self._batched = manifest.batching.max_batch_size > 0
        self.inputs = manifest.inputs
        self.outputs = manifest.outputs
        self._dtypes = {t.name: numpy_dtype(t.datatype) for t in manifest.outputs}
        self.decoupled = manifest.decoupled
        self._states = SequenceStates(manifest) if manifest.sequence is not None else None

    def _context(self, inputs: dict[str, np.ndarray]) -> ModelContext:
        """The call's context: a stateful model's carries its sequence (and the control
        inputs leave ``inputs``)."""
        if self._states is None:
            return self._ctx
        return self._states.context(self._ctx, inputs)

    def infer(self, inputs: dict[str, np.ndarray], instance: int = 0,
              execution: int = 0) -> dict[str, np.ndarray]:
        """Call the function with the (batched) inputs; check and convert what it returns."""
        if self.decoupled:
            raise BackendError(f"{self._label} is decoupled: it streams its responses "
                               "(ModelStreamInfer), it has no single answer")
        given = dict(inputs)
        ctx = self._context(given)
        try:
            result = self._fn(given, ctx)
        except BackendError:
            raise
        except Exception as exc:
            raise BackendError(f"{self._entry} raised {type(exc).__name__}: {exc}") from exc
        finally:
            if self._states is not None:
                self._states.finished(ctx)
        return self._checked(result, given)

    def stream(self, inputs: dict[str, np.ndarray], instance: int = 0,
               execution: int = 0) -> Iterator[dict[str, np.ndarray]]:
        """A decoupled model's responses: each output dict its generator yields, checked
        (a stateful one's ``ctx.state`` is kept when the generator ends)."""
        given = dict(inputs)
        ctx = self._context(given)
        try:
            produced = self._fn(given, ctx)
        except BackendError:
            raise
        except Exception as exc:
            raise BackendError(f"{self._entry} raised {type(exc).__name__}: {exc}") from exc
        if not isinstance(produced, Iterator) or isinstance(produced, dict):
            raise BackendError(f"{self._label}: {self._entry} is decoupled but returned a "
                               f"{type(produced).__name__}, not a generator (yield each "
                               "response's dict of output arrays)")
        sent = 0
        try:
            while True:
                try:
                    result = next(produced)
                except StopIteration:
                    return
                except BackendError:
                    raise
                except Exception as exc:
                    raise BackendError(f"{self._entry} raised {type(exc).__name__}: {exc} "
                                       f"after {sent} response(s)") from exc
                yield self._checked(result, given)
                sent += 1
        finally:
            close = getattr(produced, "close", None)
            if close is not None:
                close()  # a caller that stops early ends the user's generator too
            if self._states is not None:
                self._states.finished(ctx)

    def _checked(self, result: Any, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if not isinstance(result, dict):
            raise BackendError(f"{self._label}: {self._entry} returned a "
                               f"{type(result).__name__}, not a dict of output arrays")
        rows = next(iter(inputs.values())).shape[0] if self._batched and inputs else None
        out: dict[str, np.ndarray] = {}
        for spec in self.outputs:
            if spec.name not in result:
                raise BackendError(f"{self._label}: {self._entry} returned no output "
                                   f"{spec.name!r} (it returned {sorted(map(str, result))})")
            out[spec.name] = _as_array(result[spec.name], self._dtypes[spec.name])
            if rows is not None and (out[spec.name].ndim == 0
                                     or out[spec.name].shape[0] != rows):
                raise BackendError(f"{self._label}: output {spec.name!r} has shape "
                                   f"{list(out[spec.name].shape)}, but the batch has {rows} "
                                   "rows (dim 0 must be the batch)")
        return out

    def cancel(self, instance: int, execution: int) -> bool:
        """Python code cannot be stopped in-process (process isolation kills it instead)."""
        return False

    def close(self) -> None:
        self._fn = _closed


class SequenceStates:
    """A stateful Python model's ``ctx.state`` per live sequence, in the process that runs
    the model (a runtime process's own): new at START, dropped at END or once idle past
    twice the model's ``max_sequence_idle_us`` (the agent releases the sequence after once).
    A request of a sequence whose state is not here (a restarted runtime process) fails
    rather than run on an empty state."""

    def __init__(self, manifest: Manifest) -> None:
        assert manifest.sequence is not None
        # twice the agent's: the agent releases an idle sequence first (and refuses it)
        self._idle_s = 2 * manifest.sequence.max_sequence_idle_us / 1e6
        self._names = {c.kind: c.name for c in manifest.sequence.control_inputs}
        self._states: dict[int | str, tuple[dict[str, Any], float]] = {}
        self._lock = threading.Lock()

    def context(self, base: ModelContext, inputs: dict[str, np.ndarray]) -> ModelContext:
        """A copy of ``base`` for this call, the control inputs taken out of ``inputs``."""
        flags = {kind: inputs.pop(name, None) for kind, name in self._names.items()}
        ctx = copy.copy(base)
        raw = flags.get("CORRID")
        text = _text(raw.reshape(-1)[0]) if raw is not None and raw.size else ""
        seq: int | str | None = int(text) if text.isdecimal() else (text or None)
        ctx.sequence_id = seq
        ctx.sequence_start = _flag(flags.get("START"))
        ctx.sequence_end = _flag(flags.get("END"))
        now = time.monotonic()
        with self._lock:
            for key, (_, last) in list(self._states.items()):
                if now - last > self._idle_s:
                    del self._states[key]
            if seq is None:
                ctx.state = {}
            else:
                if ctx.sequence_start:
                    self._states[seq] = ({}, now)
                elif seq not in self._states:
                    raise BackendError(
                        f"sequence {seq}: its state is not here (the runtime process that "
                        "held it was restarted, or the model was reloaded); start the "
                        "sequence again")
                ctx.state = self._states[seq][0]
                self._states[seq] = (ctx.state, now)
        return ctx

    def finished(self, ctx: ModelContext) -> None:
        """After the call: an ended sequence's state is dropped."""
        if ctx.sequence_id is None:
            return
        with self._lock:
            if ctx.sequence_end:
                self._states.pop(ctx.sequence_id, None)
            elif ctx.sequence_id in self._states:
                self._states[ctx.sequence_id] = (ctx.state, time.monotonic())


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _flag(value: np.ndarray | None) -> bool:
    return value is not None and bool(value.size) and bool(value.reshape(-1)[0])


def _closed(*_: Any) -> Any:
    raise BackendError("the Python model is closed")


def _as_array(value: Any, dtype: np.dtype[Any]) -> np.ndarray:
    if dtype.kind == "O":
        array = np.asarray(value, dtype=object)
        flat = array.reshape(-1)
        for i, item in enumerate(flat):
            if isinstance(item, str):
                flat[i] = item.encode("utf-8")
            elif not isinstance(item, bytes):
                flat[i] = bytes(item)
        return array
    return np.ascontiguousarray(value, dtype=dtype)


def load(model_dir: Path, manifest: Manifest, options: BackendOptions) -> PythonBackend:
    """Load ``manifest``'s Python model from ``model_dir``."""
    return PythonBackend(model_dir, manifest, options)


PLUGIN = BackendPlugin(load=load, runtime_modules=("numpy",), cancellation=Cancellation.NONE)
"""The entry point ``edge_agent.backends: python``."""
