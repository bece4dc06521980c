"""PyTriton's calling for Python models (``backend_options.python.calling = "requests"``).

The function takes a list of requests (input name -> array) and returns a list of output
dicts, one per request; ``edge_agent.inline``'s decorators (``@batch``, ``@sample``, ...)
adapt it as PyTriton's do. The batcher hands the backend one merged batch: each of its rows
is one request here (a model without batching: the whole input is one request), and
:class:`Requests` keeps the merged arrays, so ``@batch`` calls the function on them without
splitting and stacking again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, overload

import numpy as np

from edge_agent.errors import BackendError

log = logging.getLogger(__name__)

Arrays = dict[str, np.ndarray]


class _Cuts(Sequence[Arrays]):
    """Per-request dicts of arrays cut from one batch's arrays (``merged``) when read."""

    def __init__(self, merged: Arrays) -> None:
        self.merged = merged

    def _cut(self, position: int) -> Arrays:
        raise NotImplementedError

    @overload
    def __getitem__(self, index: int) -> Arrays: ...

    @overload
    def __getitem__(self, index: slice) -> list[Arrays]: ...

    def __getitem__(self, index: int | slice) -> Arrays | list[Arrays]:
        if isinstance(index, slice):
            return [self._cut(i) for i in range(*index.indices(len(self)))]
        return self._cut(_position(index, len(self)))

    def __len__(self) -> int:
        raise NotImplementedError


class Requests(_Cuts):
    """The requests of one execution, each a dict of arrays with a batch dim of 1 (views of
    ``merged``, the batch as the batcher merged it); ``batched`` False: one request, the
    model's inputs as they came (no batch dim)."""

    def __init__(self, merged: Arrays, batched: bool) -> None:
        super().__init__(merged)
        self.batched = batched
        self._rows = next(iter(merged.values())).shape[0] if batched and merged else 1

    def __len__(self) -> int:
        return self._rows

    def _cut(self, position: int) -> Arrays:
        if not self.batched:
            return dict(self.merged)
        return {k: v[position:position + 1] for k, v in self.merged.items()}


class Results(_Cuts):
    """Per-request outputs of one batch's outputs (``merged``), ``sizes`` rows each, as
    ``@batch`` answers."""

    def __init__(self, merged: Arrays, sizes: list[int]) -> None:
        super().__init__(merged)
        self._starts = [0]
        for n in sizes:
            self._starts.append(self._starts[-1] + n)

    def __len__(self) -> int:
        return len(self._starts) - 1

    def _cut(self, position: int) -> Arrays:
        start, end = self._starts[position], self._starts[position + 1]
        return {k: v[start:end] for k, v in self.merged.items()}


def _position(index: int, length: int) -> int:
    """``index`` (negative: from the end) as a position in 0..length-1; IndexError outside."""
    if not -length <= index < length:
        raise IndexError(f"request {index} of {length}")
    return index % length


def merge_results(results: Any, requests: Requests, label: str) -> Arrays:
    """One output dict for the batch from the function's per-request answers."""
    merged = getattr(results, "merged", None)
    if isinstance(results, Results) and isinstance(merged, dict):
        return merged
    if isinstance(results, Mapping):  # one dict for the one request of an unbatched model
        results = [results]
    if not isinstance(results, Sequence) or isinstance(results, str | bytes) \
            or len(results) != len(requests):
        got = f"{len(results)} answers" if isinstance(results, list | tuple) \
            else f"a {type(results).__name__}"
        raise BackendError(f"{label} returned {got} for {len(requests)} request(s); return a "
                           "list with one dict of outputs per request (or decorate it with "
                           "@batch)")
    for i, answer in enumerate(results):
        if not isinstance(answer, Mapping):
            raise BackendError(f"{label}: answer {i} is a {type(answer).__name__}, not a dict "
                               "of output arrays")
    if not requests.batched or len(results) == 1:
        return dict(results[0])
    names = list(results[0])
    try:
        return {n: np.concatenate([np.asarray(r[n]) for r in results]) for n in names}
    except (KeyError, ValueError) as exc:
        raise BackendError(f"{label}: the answers of the batch's requests do not stack "
                           f"({type(exc).__name__}: {exc}); give every request the same "
                           "outputs") from exc


def label_of(fn: Callable[..., Any]) -> str:
    """How messages name the user's function: its module and qualified name."""
    inner = getattr(fn, "__wrapped__", fn)
    return f"{getattr(inner, '__module__', '?')}.{getattr(inner, '__qualname__', repr(inner))}"


def _failed(label: str, exc: Exception, after: str = "") -> BackendError:
    """The caller's error: the function's message; its traceback goes to the log only."""
    log.error("%s raised %s%s", label, type(exc).__name__, after, exc_info=exc)
    return BackendError(f"{label} raised {type(exc).__name__}: {exc}{after}")


def requests_calling(fn: Callable[..., Any],
                     batched: bool) -> Callable[[Arrays, Any], Arrays]:
    """``fn(requests)`` as the Python backend calls a model: ``(inputs, ctx) -> outputs``."""
    label = label_of(fn)

    def call(inputs: Arrays, ctx: Any) -> Arrays:
        requests = Requests(inputs, batched)
        try:
            results = fn(requests)
        except BackendError:
            raise
        except Exception as exc:
            raise _failed(label, exc) from exc
        return merge_results(results, requests, label)

    return call


def requests_streaming(fn: Callable[..., Any],
                       batched: bool) -> Callable[[Arrays, Any], Iterator[Arrays]]:
    """A decoupled ``fn(requests)`` (a generator yielding a list of per-request answers at a
    time) as the Python backend streams a model: ``(inputs, ctx) -> iterator of outputs``."""
    label = label_of(fn)

    def stream(inputs: Arrays, ctx: Any) -> Iterator[Arrays]:
        requests = Requests(inputs, batched)
        try:
            produced = fn(requests)
        except Exception as exc:
            raise _failed(label, exc) from exc
        if not isinstance(produced, Iterator):
            raise BackendError(f"{label} is decoupled but returned a "
                               f"{type(produced).__name__}, not a generator (yield a list "
                               "with one dict of outputs per request)")
        return _merged_stream(produced, requests, label)

    return stream


def _merged_stream(produced: Iterator[Any], requests: Requests,
                   label: str) -> Iterator[Arrays]:
    sent = 0
    try:
        while True:
            try:
                results = next(produced)
            except StopIteration:
                return
            except Exception as exc:
                raise _failed(label, exc, f" after {sent} response(s)") from exc
            yield merge_results(results, requests, label)
            sent += 1
    finally:
        close = getattr(produced, "close", None)
        if close is not None:
            close()
