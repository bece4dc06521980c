"""The JSON pre-scan (edge_agent/frontends/http/jsonscan.py) counts what json.loads would
build, whatever the strings hold and wherever the slices cut the text."""

from __future__ import annotations

import json
import random
from typing import Any

import numpy as np
import pytest

from edge_agent.frontends.http.jsonscan import (
    CONTAINER_WEIGHT,
    JsonTooLarge,
    loads,
    scan,
    to_array,
)

_TRICKY = ['\\', '"', '\\"', '\\\\', '[', ']', '{', '}', ',', '"[,', 'a\\"]', 'é', '\u2028']


def _doc(rng: random.Random, depth: int) -> Any:
    kind = rng.randrange(6 if depth < 6 else 3)
    if kind == 0:
        return rng.choice([0, 1.5, -2e10, True, None])
    if kind in (1, 2):
        return "".join(rng.choice(_TRICKY) for _ in range(rng.randrange(6)))
    if kind in (3, 4):
        return [_doc(rng, depth + 1) for _ in range(rng.randrange(5))]
    return {"".join(rng.choice(_TRICKY) for _ in range(rng.randrange(4))) + str(i):
            _doc(rng, depth + 1) for i in range(rng.randrange(4))}


def _expected(doc: Any, level: int = 0) -> tuple[int, int]:
    """(values as counted: commas + CONTAINER_WEIGHT per container, deepest nesting)."""
    if isinstance(doc, list | dict):
        children = list(doc.values()) if isinstance(doc, dict) else doc
        values = CONTAINER_WEIGHT + max(len(children) - 1, 0)
        deepest = level + 1
        for child in children:
            v, d = _expected(child, level + 1)
            values += v
            deepest = max(deepest, d)
        return values, deepest
    return 0, level


@pytest.mark.parametrize("seed", range(40))
def test_counts_match_the_parsed_document(seed: int) -> None:
    rng = random.Random(seed)
    doc = [_doc(rng, 1) for _ in range(3)]
    for text in (json.dumps(doc), json.dumps(doc, ensure_ascii=False, indent=1)):
        raw = text.encode()
        assert json.loads(raw) == doc
        values, depth = _expected(doc)
        for slice_bytes in (1, 2, 3, 5, 8, 64, 1 << 20):
            shape = scan(raw, 10**9, 10**9, slice_bytes)
            assert (shape.values, shape.depth) == (values, depth), (slice_bytes, text)


def test_bounds_are_refused_with_the_setting_named() -> None:
    with pytest.raises(JsonTooLarge, match="max_json_elements") as info:
        scan(b"[" + b"0," * 1000 + b"0]", 500, 64)
    assert info.value.status == 413
    with pytest.raises(JsonTooLarge, match="max_json_depth") as info:
        scan(b"[" * 65 + b"]" * 65, 10**6, 64)
    assert info.value.status == 400
    assert scan(b"[" * 64 + b"]" * 64, 10**6, 64).depth == 64
    # brackets and commas inside strings are not structure
    assert scan(json.dumps({"k": "[[[,,,{{{" * 1000}).encode(), 20, 2).values == \
        CONTAINER_WEIGHT


@pytest.mark.parametrize("seed", range(40))
def test_loads_in_pieces_is_json_loads(seed: int) -> None:
    rng = random.Random(seed)
    doc = {"inputs": [_doc(rng, 1) for _ in range(4)], "data": [[i, -i] for i in range(30)]}
    for text in (json.dumps(doc), json.dumps(doc, ensure_ascii=False, indent=2)):
        raw = text.encode()
        for piece in (1, 2, 3, 7, 50):
            for slice_bytes in (3, 1 << 20):
                assert loads(raw, piece, slice_bytes) == doc, (piece, slice_bytes)


@pytest.mark.parametrize("text", [
    b"[1, 2", b"[1, 2]]", b"[1 2, 3, 4]", b"[1, 2,]", b'{"a": [1, 2] "b": 1}', b'{"a" [1, 2]}',
    b"[[1, 2], [3, 4]] x", b"x [[1, 2], [3, 4]]", b"[[1, 2}, [3, 4]]", b'{1: [1, 2, 3]}',
    b"[[1, 2], 3 [4, 5]]", b"[,[1, 2, 3]]",
])
def test_loads_in_pieces_refuses_what_json_loads_refuses(text: bytes) -> None:
    with pytest.raises(ValueError):
        json.loads(text)
    with pytest.raises(ValueError):
        loads(text, piece=1)


@pytest.mark.parametrize("data", [
    [[0.5, 1.5]] * 10, list(range(25)), [[True, False]] * 9, [["a", "bcd"]] * 7,
    [[[1, 2], [3, 4]]] * 6, [1, 2.5] * 8, [[1, 2]] * 5 + [[3, 4, 5]], [1] * 9 + [[2]],
])
def test_to_array_in_pieces_is_np_array(data: list) -> None:
    try:
        expected = np.array(data)
    except ValueError:
        with pytest.raises(ValueError):
            to_array(data, piece=2)
        return
    got = to_array(data, piece=2)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert (got == expected).all()
