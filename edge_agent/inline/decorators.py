"""Decorators with PyTriton's meaning, for functions called with a list of requests.

An undecorated bound function takes ``requests`` (a list of dicts, input name -> array, one
per request; each row of a batch is one request) and returns one dict of outputs per request.
Stack them as in PyTriton::

    @fill_optionals(temperature=np.array([0.7], dtype=np.float32))
    @batch                       # the function sees stacked arrays as keyword arguments
    @group_by_values("mode")     # called once per distinct value of ``mode``
    @first_value("temperature")  # the batch's one value (all rows must agree)
    def infer(prompt, mode, temperature): ...

``@sample`` calls the function once per request with its arrays as keyword arguments.
BYTES tensors are numpy object arrays of ``bytes``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from edge_agent.backends.python_requests import Arrays, Requests, Results

__all__ = ["batch", "fill_optionals", "first_value", "group_by_values", "sample"]

BatchFunction = Callable[..., Arrays]
RequestsFunction = Callable[[Sequence[Arrays]], Any]


def _rows(arrays: Arrays) -> int:
    return next(iter(arrays.values())).shape[0] if arrays else 0


def batch(fn: BatchFunction) -> RequestsFunction:
    """Call ``fn(**inputs)`` once with every request's inputs stacked on dim 0; split its
    outputs (stacked the same way) back into one answer per request."""

    @functools.wraps(fn)
    def batched(requests: Sequence[Arrays]) -> Results:
        if isinstance(requests, Requests):
            inputs, sizes = requests.merged, [1] * len(requests)
            if not requests.batched:
                sizes = [_rows(inputs) if inputs else 1]
        else:
            names = list(requests[0]) if requests else []
            inputs = {n: np.concatenate([np.asarray(r[n]) for r in requests]) for n in names}
            sizes = [_rows(dict(r)) for r in requests]
        outputs = fn(**inputs)
        if not isinstance(outputs, dict):
            raise TypeError(f"a @batch function returns a dict of output arrays, not a "
                            f"{type(outputs).__name__}")
        outputs = {k: np.asarray(v) for k, v in outputs.items()}
        total = sum(sizes)
        for name, value in outputs.items():
            if len(sizes) > 1 and (value.ndim == 0 or value.shape[0] != total):
                raise ValueError(f"output {name!r} has shape {list(value.shape)}; a @batch "
                                 f"function returns {total} rows (dim 0 is the batch)")
        return Results(outputs, sizes)

    return batched


def sample(fn: BatchFunction) -> RequestsFunction:
    """Call ``fn(**request)`` once per request (one at a time); its dict is that request's
    answer."""

    @functools.wraps(fn)
    def one_by_one(requests: Sequence[Arrays]) -> list[Arrays]:
        return [fn(**request) for request in requests]

    return one_by_one


def group_by_values(*names: str) -> Callable[[BatchFunction], BatchFunction]:
    """Under ``@batch``: call the function once per group of rows with equal values of the
    inputs ``names`` (each call's rows share them), and put the outputs back in row order."""
    if not names:
        raise ValueError("@group_by_values needs at least one input name")

    def decorate(fn: BatchFunction) -> BatchFunction:
        @functools.wraps(fn)
        def grouped(**inputs: np.ndarray) -> Arrays:
            missing = [n for n in names if n not in inputs]
            if missing:
                raise KeyError(f"@group_by_values: no input {missing} in the request (it has "
                               f"{sorted(inputs)})")
            rows = _rows(inputs)
            groups: dict[tuple[bytes, ...], list[int]] = {}
            for i in range(rows):
                key = tuple(_row_key(inputs[n][i]) for n in names)
                groups.setdefault(key, []).append(i)
            if len(groups) <= 1:
                return fn(**inputs)
            order: list[int] = []
            parts: list[Arrays] = []
            for index in groups.values():
                parts.append({k: np.asarray(v) for k, v in
                              fn(**{k: v[index] for k, v in inputs.items()}).items()})
                order.extend(index)
            back = np.argsort(np.asarray(order), kind="stable")
            return {k: np.concatenate([p[k] for p in parts])[back] for k in parts[0]}

        return grouped

    return decorate


def _row_key(row: np.ndarray) -> bytes:
    if row.dtype.kind == "O":
        return repr([bytes(x) if isinstance(x, bytes | bytearray) else x
                     for x in row.reshape(-1).tolist()]).encode()
    return np.ascontiguousarray(row).tobytes() + str(row.dtype).encode()


def fill_optionals(**defaults: Any) -> Callable[[RequestsFunction], RequestsFunction]:
    """Give each request that lacks one of these inputs its default (an array without the
    batch dim, repeated for the request's rows)."""
    values = {k: np.asarray(v) for k, v in defaults.items()}

    def decorate(fn: RequestsFunction) -> RequestsFunction:
        @functools.wraps(fn)
        def filled(requests: Sequence[Arrays]) -> Any:
            if isinstance(requests, Requests):
                if all(k in requests.merged for k in values):
                    return fn(requests)
                merged = dict(requests.merged)
                _fill(merged, values, requests.batched)
                return fn(Requests(merged, requests.batched))
            completed = []
            for request in requests:
                request = dict(request)
                _fill(request, values, True)
                completed.append(request)
            return fn(completed)

        return filled

    return decorate


def _fill(arrays: Arrays, values: dict[str, np.ndarray], batched: bool) -> None:
    rows = _rows(arrays) or 1
    for name, value in values.items():
        if name not in arrays:
            arrays[name] = np.repeat(value[np.newaxis, ...], rows, axis=0) if batched \
                else value.copy()


def first_value(*names: str, squeeze_single_values: bool = True,
                strict: bool = True) -> Callable[[BatchFunction], BatchFunction]:
    """Under ``@batch``: pass the inputs ``names`` as their first row (a one-element row as
    a scalar when ``squeeze_single_values``); with ``strict`` every row must equal it."""
    if not names:
        raise ValueError("@first_value needs at least one input name")

    def decorate(fn: BatchFunction) -> BatchFunction:
        @functools.wraps(fn)
        def firsts(**inputs: Any) -> Arrays:
            for name in names:
                if name not in inputs:
                    continue
                array = np.asarray(inputs[name])
                first = array[0]
                if strict and not all(_row_key(r) == _row_key(first) for r in array[1:]):
                    raise ValueError(f"@first_value: the rows of input {name!r} differ; "
                                     "send one value per batch or group the batch with "
                                     f"@group_by_values({name!r}) first")
                inputs[name] = first.reshape(-1)[0] if squeeze_single_values \
                    and first.size == 1 else first
            return fn(**inputs)

        return firsts

    return decorate
