"""Sequences over the wire with the unmodified tritonclient against a real agent: gRPC unary,
gRPC ModelStreamInfer and HTTP; ModelConfig shows sequence_batching as Triton does, and the
control inputs stay out of the inputs a caller sends."""

from __future__ import annotations

import contextlib
import queue
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as tg
import tritonclient.http as th
from tritonclient.utils import InferenceServerException

from tests.sequences.conftest import IDLE_US, SLOTS, SequenceBundles
from tests.support.harness import serving_bundles

VALUES = [0, 11, 7, 5, 3, 2, 0, 1]
NOT_STARTED = "must specify the START flag on the first request of the sequence"


@dataclass
class Served:
    grpc: str
    http: str


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory,
           seq_bundles: SequenceBundles) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("sequence-agent")
    with serving_bundles(root, [seq_bundles.oldest, seq_bundles.stateless],
                         name="sequence-agent") as agent:
        assert agent.addresses is not None and agent.addresses.http
        yield Served(grpc=agent.tcp, http=agent.addresses.http)


def _expected(seq: int) -> list[int]:
    """OUTPUT = INPUT + START + END * CORRID for VALUES."""
    return [v + (i == 0) + (seq if i == len(VALUES) - 1 else 0) for i, v in enumerate(VALUES)]


def _input(module: Any, value: int) -> Any:
    inp = module.InferInput("INPUT", [1, 1], "INT32")
    inp.set_data_from_numpy(np.full((1, 1), value, np.int32))
    return inp


def _flags(i: int) -> dict[str, bool]:
    return {"sequence_start": i == 0, "sequence_end": i == len(VALUES) - 1}


def test_grpc_unary_and_http(served: Served) -> None:
    with contextlib.closing(tg.InferenceServerClient(served.grpc)) as g, \
            contextlib.closing(th.InferenceServerClient(served.http)) as h:
        got_g, got_h = [], []
        for i, v in enumerate(VALUES):  # interleaved: two live sequences
            got_g.append(int(g.infer("seq", [_input(tg, v)], sequence_id=1000,
                                     **_flags(i)).as_numpy("OUTPUT")[0, 0]))
            got_h.append(int(h.infer("seq", [_input(th, v)], sequence_id=1001,
                                     **_flags(i)).as_numpy("OUTPUT")[0, 0]))
        assert got_g == _expected(1000)
        assert got_h == _expected(1001)
        for call in (lambda: g.infer("seq", [_input(tg, 1)], sequence_id=1000),
                     lambda: h.infer("seq", [_input(th, 1)], sequence_id=1001)):
            with pytest.raises(InferenceServerException, match=NOT_STARTED):
                call()
        with pytest.raises(InferenceServerException, match="not stateful"):
            g.infer("plain", [_input(tg, 1)], sequence_id=5, sequence_start=True)


def test_grpc_stream_answers_in_order(served: Served) -> None:
    answers: queue.Queue[Any] = queue.Queue()
    with contextlib.closing(tg.InferenceServerClient(served.grpc)) as g:
        g.start_stream(callback=lambda result, error: answers.put((result, error)))
        try:
            for i, v in enumerate(VALUES):  # sent without waiting for answers
                for seq in (2000, "2001"):
                    g.async_stream_infer("seq", [_input(tg, v)], sequence_id=seq,
                                         request_id=f"{seq}_{i}", **_flags(i))
            got: dict[str, list[int]] = {"2000": [], "2001": []}
            for _ in range(2 * len(VALUES)):
                result, error = answers.get(timeout=60)
                assert error is None, error
                seq = result.get_response().id.split("_")[0]
                got[seq].append(int(result.as_numpy("OUTPUT")[0, 0]))
        finally:
            g.stop_stream()
    assert got == {"2000": _expected(2000), "2001": _expected(2001)}


def test_model_config_shows_sequence_batching(served: Served) -> None:
    with contextlib.closing(tg.InferenceServerClient(served.grpc)) as g, \
            contextlib.closing(th.InferenceServerClient(served.http)) as h:
        config = g.get_model_config("seq").config
        batching = config.sequence_batching
        assert batching.WhichOneof("strategy_choice") == "oldest"
        assert batching.oldest.max_candidate_sequences == SLOTS
        assert list(batching.oldest.preferred_batch_size) == [2, 4]  # the profile's batching
        assert batching.max_sequence_idle_microseconds == IDLE_US
        controls = {c.name: c.control[0] for c in batching.control_input}
        kinds = tg.model_config_pb2.ModelSequenceBatching.Control
        assert controls["START"].kind == kinds.CONTROL_SEQUENCE_START
        assert list(controls["START"].int32_false_true) == [0, 1]
        assert controls["CORRID"].data_type == tg.model_config_pb2.TYPE_UINT64
        assert [i.name for i in config.input] == ["INPUT"]
        assert not config.HasField("dynamic_batching")
        assert [i.name for i in g.get_model_metadata("seq").inputs] == ["INPUT"]
        http_config = h.get_model_config("seq")
        assert http_config["sequence_batching"]["oldest"]["max_candidate_sequences"] == SLOTS
        assert "sequence_batching" not in h.get_model_config("plain")


def test_metrics_show_sequences_and_slots(served: Served) -> None:
    with contextlib.closing(tg.InferenceServerClient(served.grpc)) as g:
        g.infer("seq", [_input(tg, 1)], sequence_id=3000, sequence_start=True)
        text = urllib.request.urlopen(f"http://{served.http}/metrics", timeout=60).read().decode()
        g.infer("seq", [_input(tg, 1)], sequence_id=3000, sequence_end=True)
    assert f'edge_sequence_slots{{model="seq"}} {float(SLOTS)}' in text, text
    held = [line for line in text.splitlines()
            if line.startswith('edge_sequences_active{model="seq"}')]
    assert held and float(held[0].split()[-1]) >= 1, held
