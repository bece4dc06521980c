"""The sequence batcher in the serving core (a real DataPlane over ONNX Runtime): order within
a sequence under 16 concurrent sequences, control inputs filled, idle expiry, slot exhaustion
for both strategies, restart at START, refusals for stateless models and missing ids."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from edge_agent.core.dataplane import DataPlane
from edge_agent.core.types import InferRequest, InferResult, SequenceFlags
from edge_agent.errors import InvalidInputError, QueueFullError
from tests.sequences.conftest import SLOTS, SequenceBundles, plane
from tests.support.eventually import eventually

NOT_STARTED = "must specify the START flag on the first request of the sequence"


@pytest.fixture
def dp(tmp_path: Path, seq_bundles: SequenceBundles) -> Iterator[DataPlane]:
    with plane(tmp_path, [seq_bundles.oldest, seq_bundles.direct, seq_bundles.many,
                          seq_bundles.stateless]) as served:
        yield served


def _request(model: str, value: int, seq: int | str | None, *, start: bool = False,
             end: bool = False, rows: int = 1) -> InferRequest:
    flags = None if seq is None else SequenceFlags(seq, start=start, end=end)
    return InferRequest(model=model, inputs={"INPUT": np.full((rows, 1), value, np.int32)},
                        sequence=flags)


def _out(result: InferResult) -> int:
    return int(result.outputs["OUTPUT"][0, 0])


def test_control_inputs_are_filled(dp: DataPlane) -> None:
    # OUTPUT = INPUT + START + END * CORRID (READY 1)
    assert _out(dp.infer(_request("seq", 5, 1000, start=True))) == 6
    assert _out(dp.infer(_request("seq", 7, 1000))) == 7
    assert _out(dp.infer(_request("seq", 1, 1000, end=True))) == 1001
    rows = dp.infer(_request("seq", 2, 77, start=True, rows=3)).outputs["OUTPUT"]
    assert rows.ravel().tolist() == [3, 3, 3]
    # a string of digits is its number for a UINT64 CORRID; another string is refused
    assert _out(dp.infer(_request("seq", 4, "12", start=True, end=True))) == 17
    with pytest.raises(InvalidInputError, match="send an integer sequence id"):
        dp.infer(_request("seq", 4, "corr-a", start=True))


def test_order_within_sequences_under_16_concurrent_sequences(dp: DataPlane) -> None:
    steps = 12
    answered: dict[int, list[int]] = {s: [] for s in range(1, 17)}
    lock = threading.Lock()

    def one_sequence(seq: int) -> list[Future[InferResult]]:
        futures = []
        for k in range(steps):  # all submitted at once: the agent keeps them in order
            future = dp.submit(_request("seqmany", k, seq, start=k == 0, end=k == steps - 1))

            def record(f: Future[InferResult], k: int = k) -> None:
                with lock:
                    answered[seq].append(k)
            future.add_done_callback(record)
            futures.append(future)
        return futures

    with ThreadPoolExecutor(16) as pool:
        all_futures = [f for fs in pool.map(one_sequence, answered) for f in fs]
    outputs = [_out(f.result(timeout=120)) for f in all_futures]
    assert answered == {s: list(range(steps)) for s in answered}
    for i, seq in enumerate(sorted(answered)):
        got = outputs[i * steps:(i + 1) * steps]
        assert got == [1, *range(1, steps - 1), steps - 1 + seq]
    assert dp.sequences.active("seqmany") == 0  # every sequence ended: its slot is free


def test_idle_sequence_is_released_and_refused(dp: DataPlane) -> None:
    dp.infer(_request("seq", 1, 42, start=True))
    assert dp.sequences.active("seq") == 1
    eventually(lambda: dp.sequences.active("seq") == 0, message="the idle sequence was kept")
    with pytest.raises(InvalidInputError, match=NOT_STARTED) as err:
        dp.infer(_request("seq", 1, 42))
    assert "sequence 42 to model 'seq'" in str(err.value)


def test_request_to_an_ended_or_unknown_sequence_is_refused(dp: DataPlane) -> None:
    with pytest.raises(InvalidInputError, match=NOT_STARTED):
        dp.infer(_request("seq", 1, 9))
    dp.infer(_request("seq", 1, 9, start=True))
    dp.infer(_request("seq", 1, 9, end=True))
    with pytest.raises(InvalidInputError, match=NOT_STARTED):
        dp.infer(_request("seq", 1, 9))


def test_direct_refuses_when_every_slot_is_taken(dp: DataPlane) -> None:
    for seq in range(1, SLOTS + 1):
        dp.infer(_request("seqd", 1, seq, start=True))
    with pytest.raises(QueueFullError, match="sequence slots are in use"):
        dp.infer(_request("seqd", 1, 99, start=True))
    dp.infer(_request("seqd", 1, 1, end=True))  # frees a slot
    assert _out(dp.infer(_request("seqd", 3, 99, start=True))) == 4


def test_oldest_waits_for_a_slot(dp: DataPlane) -> None:
    for seq in range(1, SLOTS + 1):
        dp.infer(_request("seq", 1, seq, start=True))
    waiting = dp.submit(_request("seq", 10, 99, start=True))
    later = dp.submit(_request("seq", 20, 98, start=True))
    assert not waiting.done() and not later.done()
    dp.infer(_request("seq", 1, 1, end=True))  # frees one slot: the oldest waiting takes it
    assert _out(waiting.result(timeout=60)) == 11
    assert not later.done()
    # the other live sequence idles out: the next one gets its slot
    assert _out(later.result(timeout=60)) == 21


def test_start_on_a_live_id_restarts_it(dp: DataPlane) -> None:
    assert _out(dp.infer(_request("seq", 5, 7, start=True))) == 6
    assert _out(dp.infer(_request("seq", 5, 7, start=True))) == 6  # restarted: START again
    assert dp.sequences.active("seq") == 1  # in the same slot
    assert _out(dp.infer(_request("seq", 5, 7, end=True))) == 12


def test_stateless_model_refuses_sequences_and_stateful_needs_an_id(dp: DataPlane) -> None:
    plain = InferRequest(model="plain", inputs={
        name: np.ones((1, 1), np.uint64 if name == "CORRID" else np.int32)
        for name in ("INPUT", "START", "END", "READY", "CORRID")})
    assert _out(dp.infer(plain)) == 3  # 1 + 1 + 1 * 1
    plain.sequence = SequenceFlags(5, start=True)
    with pytest.raises(InvalidInputError, match="not stateful"):
        dp.infer(plain)
    with pytest.raises(InvalidInputError, match="non-zero or non-empty correlation ID"):
        dp.infer(_request("seq", 1, None))
