"""Merging requests into one batch along dim 0 and splitting the outputs back, in order."""

from __future__ import annotations

import numpy as np

from edge_agent.core.batching import merge_inputs, split_outputs


def test_merge_concatenates_every_input_in_request_order() -> None:
    a: dict[str, np.ndarray] = {"x": np.zeros((1, 3), np.float32), "k": np.array([[1]], np.int64)}
    b: dict[str, np.ndarray] = {"x": np.ones((2, 3), np.float32),
                                "k": np.array([[2], [3]], np.int64)}
    merged = merge_inputs([a, b], ["x", "k"])
    assert merged["x"].shape == (3, 3) and merged["x"][0].sum() == 0 and merged["x"][1:].all()
    assert merged["k"].ravel().tolist() == [1, 2, 3]


def test_a_single_request_passes_through_without_a_copy() -> None:
    one = {"x": np.arange(4, dtype=np.float32).reshape(1, 4)}
    assert merge_inputs([one], ["x"]) is one


def test_split_gives_each_request_its_own_rows() -> None:
    out = {"y": np.arange(12).reshape(6, 2), "z": np.arange(6)}
    parts = split_outputs(out, [1, 3, 2])
    assert [p["y"].shape[0] for p in parts] == [1, 3, 2]
    assert parts[1]["z"].tolist() == [1, 2, 3] and parts[2]["y"].tolist() == [[8, 9], [10, 11]]


def test_split_slices_are_views_of_the_batch_output() -> None:
    out = {"y": np.arange(8).reshape(4, 2)}
    parts = split_outputs(out, [2, 2])
    assert all(np.shares_memory(p["y"], out["y"]) for p in parts)


def test_merge_then_split_is_the_identity() -> None:
    requests = [{"x": np.random.default_rng(i).standard_normal((n, 5))} for i, n in
                enumerate((2, 1, 4))]
    parts = split_outputs(merge_inputs(requests, ["x"]), [2, 1, 4])
    for request, part in zip(requests, parts, strict=True):
        np.testing.assert_array_equal(request["x"], part["x"])

