"""A request checked against a model version's signature before it is queued: every refusal
names the model, the tensor and what was expected."""

from __future__ import annotations

import numpy as np
import pytest

from edge_agent.core.types import InferRequest
from edge_agent.core.validation import Signature
from edge_agent.errors import InvalidInputError
from packager.bundle.manifest import TensorSpec

SIG = Signature("cam", 2, (TensorSpec("x", "FP32", (-1, 3, 4)), TensorSpec("k", "INT64", (-1,))),
                (TensorSpec("y", "FP32", (-1, 10)),), max_batch_size=8)


def request(inputs: dict[str, np.ndarray] | None = None, outputs: list[str] | None = None,
            **named: np.ndarray) -> InferRequest:
    return InferRequest(model="cam", inputs={**(inputs or {}), **named}, outputs=outputs)


def good(n: int = 2) -> dict[str, np.ndarray]:
    return {"x": np.zeros((n, 3, 4), np.float32), "k": np.zeros(n, np.int64)}


def test_a_matching_request_gives_its_row_count() -> None:
    assert SIG.validate(request(good(5))) == 5
    assert SIG.validate(request(good(1), ["y"])) == 1


@pytest.mark.parametrize(("inputs", "expected"), [
    ({}, "has no inputs; expected x FP32"),
    ({"x": np.zeros((1, 3, 4), np.float32)}, "missing inputs ['k']"),
    ({**good(1), "extra": np.zeros(1, np.float32)}, "unknown inputs ['extra']"),
    ({**good(1), "x": np.zeros((1, 3, 4), np.float64)}, "input 'x' has datatype float64"),
    ({**good(1), "x": np.zeros((1, 12), np.float32)}, "expects rank 3"),
    ({**good(1), "x": np.zeros((1, 3, 5), np.float32)}, "dim 2 must be 4"),
    ({"x": np.zeros((2, 3, 4), np.float32), "k": np.zeros(3, np.int64)}, "disagree"),
    (good(0), "0 rows"),
    (good(9), "max_batch_size is 8; split it"),
])
def test_a_mismatch_is_refused_with_what_was_expected(inputs: dict[str, np.ndarray],
                                                       expected: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        SIG.validate(request(inputs))
    assert "model 'cam' version 2" in str(info.value)
    assert expected in str(info.value)


def test_an_unknown_requested_output_is_refused() -> None:
    with pytest.raises(InvalidInputError, match=r"requested outputs \['z'\] are unknown"):
        SIG.validate(request(good(), ["y", "z"]))


def test_a_non_array_input_is_refused() -> None:
    inputs: dict[str, object] = {**good(1), "k": [0]}
    with pytest.raises(InvalidInputError, match="must be a numpy array, got list"):
        SIG.validate(InferRequest(model="cam", inputs=inputs))  # type: ignore[arg-type]


def test_an_unbatched_model_counts_one_row_and_checks_every_dim() -> None:
    sig = Signature("u", 1, (TensorSpec("x", "FP32", (2, 2)),), (), max_batch_size=0)
    assert sig.validate(request(x=np.zeros((2, 2), np.float32))) == 1
    with pytest.raises(InvalidInputError, match="dim 0 must be 2"):
        sig.validate(request(x=np.zeros((3, 2), np.float32)))


def test_bytes_inputs_accept_object_and_string_arrays() -> None:
    sig = Signature("t", 1, (TensorSpec("s", "BYTES", (-1,)),), (), max_batch_size=4)
    assert sig.validate(request(s=np.array([b"a", b"b"], dtype=object))) == 2
    assert sig.validate(request(s=np.array(["a"]))) == 1
