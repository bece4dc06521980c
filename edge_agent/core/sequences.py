"""The sequence batcher: stateful models' requests (Triton's ``sequence_batching``).

A request of a stateful model carries a sequence id (uint64 or string) and START/END flags
(:class:`~edge_agent.core.types.SequenceFlags`). Here each live sequence holds one of the
model's ``max_candidate_sequences`` slots from its START until its END (answered) or until it
has been idle ``max_sequence_idle_us``; its requests run one after another in arrival order
(each is handed to the dynamic batcher when the one before it is answered), all on the version
its START went to, with the model's control inputs (START, END, READY, CORRID) filled here.

A request to a sequence that is not live (never started, ended, idled out) is refused with
Triton's wording; a START to a live id ends that sequence and starts a new one in its slot
(after the old one's requests). When every slot is taken a new sequence is refused
(``direct``) or waits for a slot, oldest first (``oldest``).

Nothing here knows gRPC or HTTP; DataPlane routes requests with a sequence here.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edge_agent.core.types import InferRequest, InferResult, SequenceFlags
from edge_agent.errors import (
    BackendError,
    InvalidInputError,
    QueueFullError,
    RequestCancelledError,
)
from packager.bundle.datatypes import numpy_dtype
from packager.bundle.manifest import BatchingConfig, Manifest, SequenceConfig, TensorSpec

Run = Callable[[InferRequest], "Future[InferResult]"]
"""Hands a request (control inputs filled, version pinned) to the model's batcher."""

RunStream = Callable[[InferRequest], Iterator[InferResult]]
"""Streams a decoupled model's responses to a request (control inputs filled, version
pinned)."""

_NUMPY = {"INT32": np.int32, "FP32": np.float32, "BOOL": np.bool_, "UINT64": np.uint64,
          "INT64": np.int64, "UINT32": np.uint32}

MAX_WAITING = 1024
"""New sequences that may wait for a slot of one ``oldest`` model; more are refused."""

SWEEP_S = 0.05
"""How often idle sequences are looked for (a waiting ``oldest`` request gets the slot)."""


def stateless_refusal(model: str) -> InvalidInputError:
    """The answer to a sequence request for a model that is not stateful."""
    return InvalidInputError(
        f"request for model '{model}': parameters not served by this agent: 'sequence_id', "
        "'sequence_start', 'sequence_end' (the model is not stateful: it has no sequence "
        "batcher, so it would answer each request of the sequence as if it stood alone; send "
        "the requests without sequence_id, sequence_start and sequence_end, or build the model "
        "with edge-pack build --sequence)")


def missing_id(model: str) -> InvalidInputError:
    """Triton's answer to a request without a sequence id for a stateful model."""
    return InvalidInputError(f"inference request to model '{model}' must specify a non-zero "
                             "or non-empty correlation ID")


def client_inputs(manifest: Manifest) -> tuple[TensorSpec, ...]:
    """The inputs a caller sends: the model's, without the control and state inputs the agent
    fills."""
    if manifest.sequence is None:
        return manifest.inputs
    hidden, _ = manifest.sequence.hidden()
    return tuple(t for t in manifest.inputs if t.name not in hidden)


def client_outputs(manifest: Manifest) -> tuple[TensorSpec, ...]:
    """The outputs a caller gets: the model's, without its state outputs."""
    if manifest.sequence is None:
        return manifest.outputs
    _, hidden = manifest.sequence.hidden()
    return tuple(t for t in manifest.outputs if t.name not in hidden)


def instances_problem(manifest: Manifest, instances: int) -> str | None:
    """Why ``manifest``'s model cannot be served by ``instances`` instances; None if it can.

    Triton binds each sequence to one instance because its state lives there. Here an ONNX
    model's implicit state is kept by the agent and sent with each request, so any instance
    serves any step; a stateful Python model's ``ctx.state`` lives in its instance (a runtime
    process each), so it runs one instance."""
    if manifest.sequence is None or manifest.backend != "python" or instances <= 1:
        return None
    return (f"model {manifest.name!r} version {manifest.version} is a stateful Python model: "
            "its ctx.state lives in the one instance that runs each request of a sequence, so "
            f"it is served by one instance, not instances = {instances}; remove the 'instances' "
            f"setting of [models.{manifest.name}] in agent.toml (or its live setting)")


def served_instances(manifest: Manifest, batching: BatchingConfig,
                     asked: int | None) -> BatchingConfig:
    """``batching`` with the instances a stateful Python model runs (one: a bundle built
    before that rule may say more); BackendError when the agent's settings ask more
    (``asked``)."""
    if instances_problem(manifest, batching.instances) is None:
        return batching
    if asked is not None and asked > 1:
        raise BackendError(instances_problem(manifest, asked) or "")
    return dataclasses.replace(batching, instances=1)


def _version_gone(model: str, seq: int | str, version: int | None) -> InvalidInputError:
    return InvalidInputError(
        f"inference request for sequence {seq} to model '{model}': the sequence was ended by "
        f"the agent because version {version}, which served it, was unloaded (a deploy or "
        "rollback switched the model) before its END; its state is gone and another version "
        "never continues it: start the sequence again with sequence_start")


def _not_started(model: str, seq: int | str) -> InvalidInputError:
    return InvalidInputError(f"inference request for sequence {seq} to model '{model}' must "
                             "specify the START flag on the first request of the sequence")


@dataclass(eq=False)
class _Live:
    """One live sequence: its slot's holder."""

    id: int | str
    version: int | None
    manifest: Manifest  # of the version its START went to
    last: float
    tail: Future[InferResult] | None = None  # its last request's answer
    ended: bool = False
    state: dict[str, np.ndarray] = field(default_factory=dict)  # implicit state: input -> value


@dataclass(eq=False)
class _Model:
    """The sequences of one model."""

    manifest: Manifest
    config: SequenceConfig
    live: dict[int | str, _Live] = field(default_factory=dict)
    used: int = 0  # slots held (a sequence whose END is in flight still holds its slot)
    waiting: deque[Callable[[], None]] = field(default_factory=deque)  # oldest: admissions
    # sequences ended because their version was unloaded: id -> (version, when)
    gone: dict[int | str, tuple[int | None, float]] = field(default_factory=dict)


class Sequences:
    """Every stateful model's live sequences; thread-safe. :meth:`close` stops its sweeper."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.RLock()  # an answer may come while a request is chained
        self._models: dict[str, _Model] = {}
        self._stop = threading.Event()
        self._sweeper: threading.Thread | None = None

    def submit(self, request: InferRequest, flags: SequenceFlags, manifest: Manifest,
               version: int, run: Run) -> Future[InferResult]:
        """Admit ``request`` to its sequence (``version``: where a START goes) and return its
        answer's future; raises InvalidInputError (not started) or QueueFullError (direct:
        no free slot) now."""
        config = manifest.sequence
        assert config is not None
        _check_corrid(request.model, flags.id, config)
        outer: Future[InferResult] = Future()
        with self._lock:
            model = self._models.get(request.model)
            if model is None:
                model = self._models[request.model] = _Model(manifest, config)
            elif model.manifest is not manifest:  # another version (or a reload): live
                model.manifest, model.config = manifest, config  # ones keep theirs
            self._expire(request.model, model)
            live = model.live.get(flags.id)
            ended = model.gone.pop(flags.id, None)
            if not flags.start:
                if ended is not None and (live is None or live.ended):
                    raise _version_gone(request.model, flags.id, ended[0])
                if live is None or live.ended:
                    raise _not_started(request.model, flags.id)
                self._chain(request.model, model, live, request, flags, outer, run)
                return outer
            if live is not None:  # a START on a live id: the old sequence ends here
                live.ended = True
                new = _Live(flags.id, version, manifest, self._clock(), tail=live.tail)
                model.live[flags.id] = new
                self._chain(request.model, model, new, request, flags, outer, run)
                return outer
            new = _Live(flags.id, version, manifest, self._clock())
            if model.used < config.max_candidate_sequences:
                model.used += 1
                model.live[flags.id] = new
                self._chain(request.model, model, new, request, flags, outer, run)
                return outer
            if config.strategy == "direct":
                raise QueueFullError(
                    f"inference request for sequence {flags.id} to model '{request.model}': "
                    f"all {config.max_candidate_sequences} sequence slots are in use (strategy "
                    "direct); retry when a sequence ends or raise max_candidate_sequences")

            if len(model.waiting) >= MAX_WAITING:
                raise QueueFullError(
                    f"inference request for sequence {flags.id} to model '{request.model}': "
                    f"all {config.max_candidate_sequences} sequence slots are in use and "
                    f"{MAX_WAITING} new sequences already wait for one; retry later")

            def admit() -> None:  # under the lock, when a slot frees
                model.used += 1
                new.last = self._clock()
                model.live[flags.id] = new
                self._chain(request.model, model, new, request, flags, outer, run)

            model.waiting.append(admit)
            self._start_sweeper()
            return outer

    def stream(self, request: InferRequest, flags: SequenceFlags, manifest: Manifest,
               version: int, run: RunStream) -> Iterator[InferResult]:
        """A decoupled stateful model's responses to ``request``: admitted as :meth:`submit`
        admits (refusals raised now), streamed once the sequence's requests before it have
        streamed theirs; the sequence's next request waits until this stream is exhausted,
        fails or is closed."""
        ready: Future[InferRequest] = Future()  # the request, controls filled, on its turn
        finished: Future[InferResult] = Future()  # this stream's end

        def turn(req: InferRequest) -> Future[InferResult]:
            ready.set_result(req)
            return finished

        answered = self.submit(request, flags, manifest, version, turn)
        return _Stream(ready, finished, answered, run, request)

    def active(self, name: str) -> int:
        """Slots ``name``'s sequences hold now (idle ones released first)."""
        with self._lock:
            model = self._models.get(name)
            if model is None:
                return 0
            self._expire(name, model)
            return model.used

    def live_on(self, name: str, version: int) -> int:
        """Live sequences of ``name`` pinned to ``version`` (idle ones released first)."""
        with self._lock:
            model = self._models.get(name)
            if model is None:
                return 0
            self._expire(name, model)
            return sum(1 for live in model.live.values() if live.version == version)

    def slots(self) -> dict[str, tuple[int, int]]:
        """Each model's (slots held, slots), idle sequences released first."""
        with self._lock:
            for name, model in self._models.items():
                self._expire(name, model)
            return {name: (m.used, m.config.max_candidate_sequences)
                    for name, m in self._models.items()}

    def drain(self, name: str, version: int, timeout_s: float) -> bool:
        """Before ``name``'s ``version`` is unloaded: wait up to ``timeout_s`` for its live
        sequences to end (END answered, or idle past ``max_sequence_idle_us``), new ones
        going to the default version meanwhile; end those still live then, their next request
        refused (never served by another version). True when none had to be ended."""
        deadline = self._clock() + max(0.0, timeout_s)
        while True:
            with self._lock:
                model = self._models.get(name)
                if model is None:
                    return True
                self._expire(name, model)
                left = [live for live in model.live.values() if live.version == version]
                if not left:
                    return True
                if self._clock() >= deadline or self._stop.is_set():
                    for live in left:
                        del model.live[live.id]
                        live.ended = True
                        model.gone[live.id] = (version, self._clock())
                        self._release(name, model)
                    return False
            time.sleep(SWEEP_S)

    def close(self) -> None:
        """Stop the idle sweeper."""
        self._stop.set()
        sweeper = self._sweeper
        if sweeper is not None:
            sweeper.join()

    # ------------------------------------------------------------------ internals (locked)
    def _chain(self, name: str, model: _Model, live: _Live, request: InferRequest,
               flags: SequenceFlags, outer: Future[InferResult], run: Run) -> None:
        """Run ``request`` when the sequence's previous request is answered."""
        before = live.tail
        live.tail = outer
        live.last = self._clock()
        if flags.end:
            live.ended = True
            if model.live.get(live.id) is live:
                del model.live[live.id]
        manifest = live.manifest
        assert manifest.sequence is not None
        states = manifest.sequence.states
        req = dataclasses.replace(request, version=live.version,
                                  inputs=dict(_with_controls(request, flags, manifest)))
        if states and req.outputs is not None:
            req.outputs = [*req.outputs, *(t.output_name for t in states
                                           if t.output_name not in req.outputs)]

        def done(answer: Future[InferResult]) -> None:
            result = None
            if not answer.cancelled() and answer.exception() is None:
                result = answer.result()
                if states:
                    outputs = dict(result.outputs)
                    live.state = {t.input_name: outputs.pop(t.output_name) for t in states}
                    result = dataclasses.replace(result, outputs=outputs)
            with self._lock:
                live.last = self._clock()
                if flags.end and live.tail is outer:
                    self._release(name, model)
            if answer.cancelled():
                outer.cancel()
            elif result is None:
                outer.set_exception(answer.exception() or RuntimeError("no answer"))
            else:
                outer.set_result(result)

        def launch(_: object = None) -> None:
            if states:  # the answer before this one is in: its state goes in
                req.inputs.update(_state_inputs(req, live, manifest, flags.start))
            try:
                inner = run(req)
            except BaseException as exc:
                inner = Future()
                inner.set_exception(exc)
            inner.add_done_callback(done)

        if before is None or before.done():
            launch()
        else:
            before.add_done_callback(launch)

    def _release(self, name: str, model: _Model) -> None:
        """A slot freed: the oldest waiting sequence takes it."""
        model.used -= 1
        if model.waiting and model.used < model.config.max_candidate_sequences:
            model.waiting.popleft()()

    def _expire(self, name: str, model: _Model) -> None:
        """Release sequences idle past the model's ``max_sequence_idle_us`` (none in flight)."""
        limit = model.config.max_sequence_idle_us / 1e6
        now = self._clock()
        for seq, (_, when) in list(model.gone.items()):
            if now - when > limit:  # past the idle time it would have been released anyway
                del model.gone[seq]
        for seq, live in list(model.live.items()):
            if (live.tail is None or live.tail.done()) and now - live.last > limit:
                del model.live[seq]
                live.ended = True
                self._release(name, model)

    def _start_sweeper(self) -> None:
        if self._sweeper is None:
            self._sweeper = threading.Thread(target=self._sweep, name="sequence-sweeper",
                                             daemon=True)
            self._sweeper.start()

    def _sweep(self) -> None:
        while not self._stop.wait(SWEEP_S):
            with self._lock:
                for name, model in self._models.items():
                    if model.waiting:
                        self._expire(name, model)


class _Stream:
    """The responses of one request of a decoupled model's sequence (an iterator): it waits
    for its turn, then passes the model's responses through; exhausted, failed or closed, it
    lets the sequence's next request go."""

    def __init__(self, ready: Future[InferRequest], finished: Future[InferResult],
                 answered: Future[InferResult], run: RunStream, request: InferRequest) -> None:
        self._ready, self._finished, self._answered = ready, finished, answered
        self._run, self._request = run, request
        self._responses: Iterator[InferResult] | None = None

    def __iter__(self) -> _Stream:
        return self

    def __next__(self) -> InferResult:
        try:
            if self._responses is None:
                either: list[Future[Any]] = [self._ready, self._answered]
                wait(either, return_when=FIRST_COMPLETED)
                if not self._ready.done():  # failed or cancelled before its turn
                    raise self._answered.exception() or RuntimeError("no answer")
                self._responses = self._run(self._ready.result())
            return next(self._responses)
        except StopIteration:
            self._end(None)
            raise
        except BaseException as exc:
            self._end(exc)
            raise

    def close(self) -> None:
        """Stop the model's responses (if they started) and let the sequence go on."""
        close = getattr(self._responses, "close", None)
        if close is not None:
            close()
        self._end(RequestCancelledError(
            f"request {self._request.id or '(no id)'} of sequence to model "
            f"'{self._request.model}': its stream was closed by its caller"))

    def __del__(self) -> None:  # dropped without close: the sequence must not stall
        if not self._finished.done():
            self.close()

    def _end(self, error: BaseException | None) -> None:
        if self._finished.done():
            return
        if error is None:
            self._finished.set_result(InferResult(self._request.model, 0, {},
                                                  self._request.id))
        else:
            self._finished.set_exception(error)


def _state_inputs(request: InferRequest, live: _Live, manifest: Manifest,
                  start: bool) -> dict[str, np.ndarray]:
    """The state inputs: what the sequence's request before answered (zeros at START, or
    when the row count changed)."""
    assert manifest.sequence is not None
    specs = {t.name: t for t in manifest.inputs}
    first = next(iter(request.inputs.values()), None)
    rows = int(first.shape[0]) if manifest.batched and first is not None and first.ndim else 1
    out = {}
    for t in manifest.sequence.states:
        spec = specs[t.input_name]
        shape = tuple(rows if i == 0 and manifest.batched else max(d, 1)
                      for i, d in enumerate(spec.shape))
        kept = None if start else live.state.get(t.input_name)
        if kept is None or (manifest.batched and kept.shape[:1] != shape[:1]):
            kept = np.zeros(shape, dtype=numpy_dtype(spec.datatype))
        out[t.input_name] = kept
    return out


def _check_corrid(model: str, seq: int | str, config: SequenceConfig) -> None:
    """InvalidInputError for a string id that a numeric CORRID input cannot hold (a decimal
    string is taken as its number)."""
    corrid = config.control("CORRID")
    if (corrid is not None and corrid.datatype != "BYTES" and isinstance(seq, str)
            and not seq.isdecimal()):
        raise InvalidInputError(
            f"inference request for sequence {seq!r} to model '{model}': the model's CORRID "
            f"control input {corrid.name!r} is {corrid.datatype}; send an integer sequence id "
            "(or a string of digits)")


def _corrid_value(seq: int | str, datatype: str) -> object:
    if datatype == "BYTES":
        return str(seq).encode()
    return int(seq)


def _with_controls(request: InferRequest, flags: SequenceFlags,
                   manifest: Manifest) -> dict[str, np.ndarray]:
    """The request's inputs with the control inputs the agent fills (one value per row of a
    batched model; the declared shape, its dynamic dims 1, of an unbatched one)."""
    config = manifest.sequence
    if config is None or not config.control_inputs:
        return request.inputs
    inputs = dict(request.inputs)
    first = next(iter(request.inputs.values()), None)
    rows = int(first.shape[0]) if manifest.batched and first is not None and first.ndim else 1
    shapes = {t.name: t.shape for t in manifest.inputs}
    values = {"START": flags.start, "END": flags.end, "READY": True}
    for c in config.control_inputs:
        if c.kind == "CORRID":
            value: object = _corrid_value(flags.id, c.datatype)
            dtype: object = np.object_ if c.datatype == "BYTES" else _NUMPY[c.datatype]
        else:
            value, dtype = values[c.kind], _NUMPY[c.datatype]
        shape = tuple(rows if i == 0 and manifest.batched else max(d, 1)
                      for i, d in enumerate(shapes[c.name]))
        inputs[c.name] = np.full(shape, value, dtype=dtype)  # type: ignore[call-overload]  # dtype is one of _NUMPY's or object
    return inputs
