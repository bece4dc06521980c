"""Live sequences across deploys, rollbacks and a killed runtime process, on a real agent with
the unmodified tritonclient: a sequence finishes on the version its START went to (the deploy
waits for it before unloading that version) while new sequences start on the new one; a
rollback whose drain ends a sequence answers its next request with a clear error, never
with another version's state; after kill -9 of a stateful Python model's runtime process its
live sequence is refused, new sequences are served."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
import tritonclient.grpc as tg
from tritonclient.utils import InferenceServerException

from edge_agent.client.agent_client import ManagementError
from packager.build import build_bundles
from packager.bundle.manifest import SequenceConfig, StateSpec
from packager.bundle.signing import generate_keypair
from packager.spec_build import build_spec_bundles
from packager.triton_samples import write_python_spec
from tests.sequences.conftest import ORT, make_accumulator
from tests.sequences.test_python_sequence import ACCUMULATE, IO
from tests.support.cli import console
from tests.support.eventually import eventually
from tests.support.harness import InProcessAgent, sections, start_agent
from tests.support.processes import command_line

IDLE_US = 600_000_000  # sequences never idle out during a test


@dataclass(frozen=True)
class Signed:
    public_key: Path
    sums: dict[int, Path]  # version -> "sum" adding version * INPUT
    python: Path  # "pyacc": the stateful Python accumulator


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> Signed:
    root = tmp_path_factory.mktemp("sequence-deploys")
    private, public = generate_keypair(root / "keys")
    sequence = SequenceConfig("oldest", max_sequence_idle_us=IDLE_US, max_candidate_sequences=8,
                              states=(StateSpec("STATE_IN", "STATE_OUT"),))
    sums = {}
    for version in (1, 2):
        onnx = make_accumulator(root / f"sum{version}.onnx", factor=version)
        (sums[version],) = build_bundles(onnx, name="sum", version=version, profiles=[ORT],
                                         out_dir=root / "out", key_path=private, max_batch=8,
                                         sequence=sequence)
    spec = write_python_spec(root / "src", "pyacc", module="accumulate", code=ACCUMULATE,
                             entry="accumulate", io=IO)
    with spec.open("a") as f:
        f.write(f'\n[sequence]\nmax_sequence_idle_us = {IDLE_US}\n')
    (python,) = build_spec_bundles(spec, name="pyacc", version=1, profiles=[ORT],
                                   out_dir=root / "out", key_path=private)
    return Signed(public, sums, python)


@contextlib.contextmanager
def _agent(state: Path, signed: Signed, drain_timeout_s: float) -> Iterator[InProcessAgent]:
    agent = start_agent(state, sections("sequence-deploys", signed.public_key,
                                        drain_timeout_s=drain_timeout_s))
    try:
        yield agent
    finally:
        agent.stop()


def _sum(client: tg.InferenceServerClient, value: int, seq: int, *, start: bool = False,
         end: bool = False) -> int:
    inp = tg.InferInput("INPUT", [1, 1], "INT32")
    inp.set_data_from_numpy(np.full((1, 1), value, np.int32))
    result = client.infer("sum", [inp], sequence_id=seq, sequence_start=start,
                          sequence_end=end)
    out: Any = result.as_numpy("OUTPUT")
    return int(out[0, 0])


def test_a_deploy_waits_for_live_sequences_and_new_ones_start_on_it(
        tmp_path: Path, signed: Signed) -> None:
    with _agent(tmp_path / "state", signed, drain_timeout_s=60) as agent, \
            contextlib.closing(tg.InferenceServerClient(agent.tcp)) as client:
        assert agent.deploy(signed.sums[1]).ok
        assert _sum(client, 3, 1, start=True) == 3
        outcome: list[Any] = []
        deploy = threading.Thread(target=lambda: outcome.append(agent.deploy(signed.sums[2])))
        deploy.start()
        try:
            eventually(lambda: agent.dataplane.default_version("sum") == 2, timeout=120,
                       message="version 2 never took new sequences")
            assert _sum(client, 4, 2, start=True) == 8  # a new sequence: version 2 (2 x 4)
            assert _sum(client, 4, 1) == 7  # the live one: version 1 and its state (3 + 4)
            assert deploy.is_alive() and not outcome  # version 1 is kept for sequence 1
            with agent.client() as management:  # ListModels: live sequences per version
                listed = {v.version: v for v in management.models("sum")}
            assert (listed[1].sequences_active, listed[1].sequence_slots) == (1, 8)
            assert (listed[2].sequences_active, listed[2].sequence_slots) == (1, 8)
            assert _sum(client, 1, 2) == 10
            assert _sum(client, 1, 1, end=True) == 8  # sequence 1 ends on version 1
        finally:
            deploy.join(120)
        assert outcome and outcome[0].ok, outcome
        eventually(lambda: not agent.dataplane.model_ready("sum", 1), timeout=60,
                   message="version 1 stayed loaded after its last sequence ended")
        token = tmp_path / "token"
        token.write_text(agent.token)
        status = console(None, "status", "--insecure", "--agent", agent.management,
                         "--token-file", str(token))
        assert status.code == 0, status.err
        assert "sequences" in status.out and "│ 1/8 " in status.out, status.out
        assert _sum(client, 5, 2, end=True) == 20  # sequence 2 never moved (10 + 2 x 5)


def test_a_rollback_that_ends_a_sequence_refuses_its_next_request(
        tmp_path: Path, signed: Signed) -> None:
    with _agent(tmp_path / "state", signed, drain_timeout_s=0.5) as agent, \
            contextlib.closing(tg.InferenceServerClient(agent.tcp)) as client, \
            agent.client() as management:
        assert agent.deploy(signed.sums[1]).ok
        assert agent.deploy(signed.sums[2]).ok
        assert _sum(client, 4, 7, start=True) == 8  # on version 2
        rolled = management.rollback("sum")
        assert rolled.ok, rolled
        with pytest.raises(InferenceServerException) as refused:
            _sum(client, 1, 7)  # version 1 must never add to version 2's state
        assert "version 2, which served it, was unloaded" in str(refused.value), refused.value
        assert "start the sequence again" in str(refused.value)
        assert _sum(client, 4, 7, start=True) == 4  # started again: on version 1
        assert _sum(client, 1, 7, end=True) == 5


def test_kill_9_with_a_live_sequence_refuses_it_and_serves_new_ones(
        tmp_path: Path, signed: Signed) -> None:
    with _agent(tmp_path / "state", signed, drain_timeout_s=30) as agent, \
            contextlib.closing(tg.InferenceServerClient(agent.tcp)) as client:
        assert agent.deploy(signed.python).ok

        def call(value: int, seq: int, start: bool = False) -> int:
            inp = tg.InferInput("INPUT", [1], "INT32")
            inp.set_data_from_numpy(np.array([value], np.int32))
            out: Any = client.infer("pyacc", [inp], sequence_id=seq,
                                    sequence_start=start).as_numpy("OUTPUT")
            return int(out[0])

        assert call(5, 11, start=True) == 5
        assert call(6, 11) == 11
        runtimes = [p for p in psutil.Process().children(recursive=True)
                    if "edge_agent.backends.runtime_process" in " ".join(command_line(p))
                    and "pyacc" in " ".join(command_line(p))]
        assert len(runtimes) == 1, runtimes  # a stateful Python model: one instance
        os.kill(runtimes[0].pid, signal.SIGKILL)

        def refused() -> str:
            try:
                call(1, 11)
            except InferenceServerException as exc:
                return str(exc) if "start the sequence again" in str(exc) else ""
            raise AssertionError("sequence 11 was served after its state was lost")

        eventually(refused, timeout=120, message="the lost state was never reported")
        assert call(2, 12, start=True) == 2  # a new sequence works
        assert call(3, 11, start=True) == 3  # and the old id, started again
        assert call(4, 11) == 7
        with agent.client() as management, pytest.raises(ManagementError) as refused:
            management.set_model_settings("pyacc", {"instances": "2"})
        assert refused.value.status == "INVALID_ARGUMENT"
        assert "setting 'instances' = 2" in str(refused.value)
        assert "stateful Python model" in str(refused.value)
        assert call(5, 11) == 12  # nothing changed
