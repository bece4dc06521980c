"""The runtime-process wire on a real socketpair and a real memfd mapping."""

from __future__ import annotations

import mmap
import os
import socket
import threading

import numpy as np
import pytest

from edge_agent.backends.ipc import Channel, WireError


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def _memfd_region(size: int) -> mmap.mmap:
    fd = os.memfd_create("test-region")
    try:
        os.ftruncate(fd, size)
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)


def _roundtrip(pair, tensors, send_region=None, recv_region=None, copy=False):
    a, b = pair
    sender = Channel(a, outgoing=send_region)
    receiver = Channel(b, incoming=recv_region)
    got = {}
    # a large tensor does not fit the socket buffer: receive while sending
    reader = threading.Thread(target=lambda: got.update(
        zip(("header", "tensors"), receiver.recv(copy=copy), strict=True)))
    reader.start()
    sender.send({"op": "infer", "n": 1}, tensors)
    reader.join(60)
    return got["header"], got["tensors"]


def test_tensors_on_the_socket_arrive_equal_and_writeable(pair) -> None:
    big = np.random.default_rng(0).standard_normal((8, 3, 224, 224)).astype(np.float32)
    odd = np.arange(12, dtype=np.int64).reshape(3, 4)[:, ::2]  # not contiguous
    header, out = _roundtrip(pair, {"big": big, "odd": odd, "empty": np.zeros((0, 4))})
    assert header == {"op": "infer", "n": 1}
    np.testing.assert_array_equal(out["big"], big)
    np.testing.assert_array_equal(out["odd"], odd)
    assert out["empty"].shape == (0, 4)
    assert out["big"].flags.writeable


def test_tensors_in_shared_memory_are_views_unless_copied(pair) -> None:
    mem = _memfd_region(1 << 20)
    x = np.random.default_rng(1).standard_normal((4, 64)).astype(np.float32)
    _, out = _roundtrip(pair, {"x": x}, memoryview(mem), memoryview(mem))
    np.testing.assert_array_equal(out["x"], x)
    assert np.shares_memory(out["x"], np.frombuffer(mem, np.uint8))
    _, copied = _roundtrip(pair, {"x": x}, memoryview(mem), memoryview(mem), copy=True)
    assert not np.shares_memory(copied["x"], np.frombuffer(mem, np.uint8))


def test_tensors_larger_than_the_region_fall_back_to_the_socket(pair) -> None:
    mem = _memfd_region(4096)
    big = np.ones((64, 64), np.float32)  # 16 KiB > 4 KiB
    _, out = _roundtrip(pair, {"big": big}, memoryview(mem), memoryview(mem))
    np.testing.assert_array_equal(out["big"], big)
    assert not np.shares_memory(out["big"], np.frombuffer(mem, np.uint8))


def test_strings_do_not_cross_and_a_closed_peer_is_eof(pair) -> None:
    a, b = pair
    with pytest.raises(WireError, match="only numeric"):
        Channel(a).send({}, {"s": np.array(["x"])})  # numpy str: not a BYTES tensor
    a.close()
    with pytest.raises(EOFError):
        Channel(b).recv()


def test_a_small_inline_tensor_arriving_with_its_header_and_several_messages(pair) -> None:
    a, b = pair
    sender, receiver = Channel(a), Channel(b)
    for i in range(3):  # inline tensors share the first read with the header
        x = np.full((2, 3), i, np.int32)
        sender.send({"i": i}, {"x": x, "y": x[:, :1] * 2})
        header, out = receiver.recv()
        assert header == {"i": i}
        np.testing.assert_array_equal(out["x"], x)
        np.testing.assert_array_equal(out["y"], x[:, :1] * 2)


def test_a_header_larger_than_the_scratch_buffer(pair) -> None:
    a, b = pair
    big = {"blob": "x" * 200_000}
    got = {}
    reader = threading.Thread(target=lambda: got.update(zip(
        ("header", "tensors"), Channel(b).recv(), strict=True)))
    reader.start()
    Channel(a).send(dict(big), {"x": np.arange(5.0)})
    reader.join(60)
    assert got["header"] == big
    np.testing.assert_array_equal(got["tensors"]["x"], np.arange(5.0))
