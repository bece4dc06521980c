"""BYTES tensors in system shared memory, in Triton's serialized form (each element a 4-byte
little-endian length and its bytes), in and out, through the unmodified tritonclient and its
shared memory utilities over gRPC and HTTP against ``simple_string`` (sum and difference of
integer strings), as Triton's ``simple_*_shm_string_client.py`` examples do."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as tg
import tritonclient.http as th
import tritonclient.utils.shared_memory as shm
from tritonclient import utils
from tritonclient.utils import InferenceServerException

Region = tuple[str, Any, int]
"""(registered name, tritonclient handle, byte size)."""


def _strings(values: np.ndarray) -> np.ndarray:
    return np.array([str(int(v)).encode() for v in values.reshape(-1)],
                    dtype=object).reshape(values.shape)


@pytest.fixture
def region(client: Any) -> Iterator[Callable[[int], Region]]:
    """Creates (tritonclient's utilities, unique keys: /dev/shm is the machine's) and
    registers regions; destroys them afterwards."""
    made: list[Any] = []

    def make(byte_size: int) -> Region:
        tag = f"edge_shmwords_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        handle = shm.create_shared_memory_region(tag, f"/{tag}", byte_size)
        made.append(handle)
        client.register_system_shared_memory(tag, f"/{tag}", byte_size)
        return tag, handle, byte_size

    try:
        yield make
    finally:
        for handle in made:
            shm.destroy_shared_memory_region(handle)


def _module(client: Any) -> Any:
    return tg if isinstance(client, tg.InferenceServerClient) else th


def test_bytes_inputs_and_outputs_in_shared_memory(client: Any,
                                                    region: Callable[[int], Region]) -> None:
    a = np.arange(16, dtype=np.int64).reshape(1, 16)
    b = np.full((1, 16), 7, dtype=np.int64)
    ins = [utils.serialize_byte_tensor(_strings(x)) for x in (a, b)]
    want = [_strings(a + b), _strings(a - b)]
    in_regions = [region(utils.serialized_byte_size(s)) for s in ins]
    for (_, handle, _), serialized in zip(in_regions, ins, strict=True):
        shm.set_shared_memory_region(handle, [serialized])
    out_regions = [region(utils.serialized_byte_size(utils.serialize_byte_tensor(w)) + 8)
                   for w in want]  # room to spare, as a client sizes an unknown output
    mod = _module(client)
    inputs = []
    for i, (name, _, size) in enumerate(in_regions):
        inputs.append(mod.InferInput(f"INPUT{i}", [1, 16], "BYTES"))
        inputs[-1].set_shared_memory(name, size)
    outputs = []
    for i, (name, _, size) in enumerate(out_regions):
        outputs.append(mod.InferRequestedOutput(f"OUTPUT{i}"))
        outputs[-1].set_shared_memory(name, size)
    result = client.infer("simple_string", inputs, outputs=outputs)
    for i, ((_, handle, _), expected) in enumerate(zip(out_regions, want, strict=True)):
        out = result.get_output(f"OUTPUT{i}")
        datatype = out.datatype if mod is tg else out["datatype"]
        shape = list(out.shape) if mod is tg else out["shape"]
        assert (datatype, shape) == ("BYTES", [1, 16])
        got = shm.get_contents_as_numpy(handle, utils.triton_to_np_dtype(datatype), shape)
        assert got.tolist() == expected.tolist()


def test_bytes_input_in_shared_memory_with_a_plain_output(
        client: Any, region: Callable[[int], Region]) -> None:
    x = np.array([[b"5"] * 16], dtype=object)
    serialized = utils.serialize_byte_tensor(x)
    name, handle, size = region(utils.serialized_byte_size(serialized))
    shm.set_shared_memory_region(handle, [serialized])
    mod = _module(client)
    first = mod.InferInput("INPUT0", [1, 16], "BYTES")
    first.set_shared_memory(name, size)
    second = mod.InferInput("INPUT1", [1, 16], "BYTES")
    second.set_data_from_numpy(np.array([[b"2"] * 16], dtype=object))
    result = client.infer("simple_string", [first, second])
    assert result.as_numpy("OUTPUT0").tolist() == [[b"7"] * 16]
    assert result.as_numpy("OUTPUT1").tolist() == [[b"3"] * 16]


def test_a_bytes_region_that_does_not_hold_the_shape_is_refused(
        client: Any, region: Callable[[int], Region]) -> None:
    serialized = utils.serialize_byte_tensor(np.array([b"1"] * 15, dtype=object))
    name, handle, size = region(utils.serialized_byte_size(serialized))
    shm.set_shared_memory_region(handle, [serialized])
    mod = _module(client)
    inputs = [mod.InferInput(f"INPUT{i}", [1, 16], "BYTES") for i in (0, 1)]
    for inp in inputs:
        inp.set_shared_memory(name, size)
    with pytest.raises(InferenceServerException) as err:
        client.infer("simple_string", inputs)
    assert "BYTES contents end after 15 of 16 elements" in err.value.message()


def test_a_bytes_output_too_big_for_its_region_is_refused(
        client: Any, region: Callable[[int], Region]) -> None:
    name, _, size = region(16)
    mod = _module(client)
    inputs = []
    for i in (0, 1):
        inputs.append(mod.InferInput(f"INPUT{i}", [1, 16], "BYTES"))
        inputs[-1].set_data_from_numpy(np.array([[b"1"] * 16], dtype=object))
    out = mod.InferRequestedOutput("OUTPUT0")
    out.set_shared_memory(name, size)
    with pytest.raises(InferenceServerException) as err:
        client.infer("simple_string", inputs, outputs=[out])
    assert f"do not fit in the 16 bytes given in shared memory region '{name}'" \
        in err.value.message()


def test_a_bytes_input_larger_than_its_region_is_refused_before_reading(
        client: Any, region: Callable[[int], Region]) -> None:
    name, _, _ = region(64)
    mod = _module(client)
    inputs = [mod.InferInput(f"INPUT{i}", [1, 16], "BYTES") for i in (0, 1)]
    for inp in inputs:
        inp.set_shared_memory(name, 1 << 50)
    with pytest.raises(InferenceServerException) as err:
        client.infer("simple_string", inputs)
    assert f"do not fit in shared memory region '{name}' (64 bytes registered)" \
        in err.value.message()
