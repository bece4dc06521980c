"""Decoupled Python models (Triton's decoupled transaction policy) on a real agent: a generator
streams N responses to one request over ModelStreamInfer, through the unmodified tritonclient
streaming API, from the model's runtime process."""

from __future__ import annotations

import queue
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from edge_agent.config.models import ModelOverrides
from tests.pipelines.conftest import Agent, Built, build, python_spec, running_agent
from tests.support.eventually import eventually

COUNTING = textwrap.dedent('''
    import time

    import numpy as np


    def count(inputs, ctx):
        """X[0, 0] responses, each X + i; raises after them when X[0, 1] < 0."""
        x = inputs["X"]
        for i in range(int(x[0, 0])):
            yield {"Y": x + i}
        if float(x[0, 1]) < 0:
            raise ValueError("gave up mid-stream")


    def stall(inputs, ctx):
        """One response, then hangs when X[0, 1] < 0."""
        yield {"Y": inputs["X"]}
        if float(inputs["X"][0, 1]) < 0:
            time.sleep(3600)
        yield {"Y": inputs["X"] + 1}


    def not_a_generator(inputs, ctx):
        return {"Y": inputs["X"]}
    ''')

TALLY = textwrap.dedent('''
    import os
    import time

    LOGS = {logs!r}


    def _tally(inputs, name):
        """X[0, 0] responses, one every 10 ms; how many it produced is written when it ends
        (exhausted, or closed: GeneratorExit)."""
        x = inputs["X"]
        produced = 0
        try:
            for i in range(int(x[0, 0])):
                produced += 1
                yield {{"Y": x + i}}
                time.sleep(0.01)
        finally:
            with open(os.path.join(LOGS, name + ".tmp"), "w") as f:
                f.write(str(produced))
            os.replace(os.path.join(LOGS, name + ".tmp"), os.path.join(LOGS, name))


    def isolated(inputs, ctx):
        yield from _tally(inputs, "isolated")


    def in_process(inputs, ctx):
        yield from _tally(inputs, "in_process")
    ''')
TALLIES = {"tally": "isolated", "tally_inproc": "in_process"}
"""Model name -> the entry (and its log file): the runtime process's generator, and one
kept in the agent's process (isolation "thread")."""

Response = tuple[Any, Any]


def request(n: int, *, fail: bool = False) -> list[grpcclient.InferInput]:
    x = np.array([[n, -1.0 if fail else 1.0, 2.0, 3.0]], np.float32)
    inp = grpcclient.InferInput("X", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    return [inp]


def final(result: Any) -> bool:
    params = result.get_response().parameters
    return "triton_final_response" in params and params["triton_final_response"].bool_param


@pytest.fixture(scope="module")
def tally_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the tally models write how many responses they produced."""
    return tmp_path_factory.mktemp("tally-logs")


@pytest.fixture(scope="module")
def agent(built: Built, tally_logs: Path,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    src = tmp_path_factory.mktemp("decoupled-src")
    (src / "counting.py").write_text(COUNTING)
    (src / "tally.py").write_text(TALLY.format(logs=str(tally_logs)))
    out = src / "bundles"
    counting = build(python_spec(src, "count", "counting:count", "decoupled = true",
                                 source="counting.py"), 1, out, built.private_key)
    plain = build(python_spec(src, "plain", "counting:not_a_generator", "decoupled = true",
                              source="counting.py"), 1, out, built.private_key)
    stall = build(python_spec(src, "stall", "counting:stall", "decoupled = true",
                              source="counting.py"), 1, out, built.private_key)
    tallies = [build(python_spec(src, name, f"tally:{entry}", "decoupled = true",
                                 source="tally.py"), 1, out, built.private_key)
               for name, entry in TALLIES.items()]
    models = {"stall": ModelOverrides(execution_timeout_ms=1500),
              "tally_inproc": ModelOverrides(isolation="thread")}
    with running_agent(tmp_path_factory.mktemp("agent"), built.public_key,
                       models=models) as running:
        for bundle in (counting, plain, stall, built.bundles["fail"], *tallies):
            result = running.deploy(bundle)
            assert result.ok, result.message
        yield running


class Stream:
    """tritonclient's streaming API, unmodified: responses collected from its callback."""

    def __init__(self, url: str) -> None:
        self.client = grpcclient.InferenceServerClient(url)
        self.responses: queue.Queue[Response] = queue.Queue()
        self.client.start_stream(callback=lambda result, error: self.responses.put(
            (result, error)))

    def take(self, n: int) -> list[Response]:
        return [self.responses.get(timeout=120) for _ in range(n)]

    def close(self, *, cancel: bool = False) -> None:
        self.client.stop_stream(cancel_requests=cancel)
        self.client.close()


@pytest.mark.parametrize("url", ["tcp", "uds"])
def test_one_request_streams_n_responses_then_the_final_flag(agent: Agent, url: str) -> None:
    stream = Stream(agent.tcp if url == "tcp" else agent.uds)
    try:
        stream.client.async_stream_infer("count", request(5), request_id="r-1",
                                         enable_empty_final_response=True)
        got = stream.take(6)
    finally:
        stream.close()
    assert [error for _, error in got] == [None] * 6
    for i, (result, _) in enumerate(got[:5]):
        assert result.get_response().id == "r-1"
        assert not final(result)
        np.testing.assert_array_equal(result.as_numpy("Y"),
                                      np.array([[5 + i, 1 + i, 2 + i, 3 + i]], np.float32))
    last = got[5][0]
    assert final(last) and last.get_response().id == "r-1"
    assert not last.get_response().outputs


def test_without_the_empty_final_response_only_the_data_responses_come(agent: Agent) -> None:
    stream = Stream(agent.tcp)
    try:
        stream.client.async_stream_infer("count", request(2), request_id="a")
        stream.client.async_stream_infer("count", request(3), request_id="b")
        got = stream.take(5)
    finally:
        stream.close()
    assert [r.get_response().id for r, _ in got] == ["a", "a", "b", "b", "b"]
    assert stream.responses.empty()


def test_a_generator_raising_mid_stream_answers_an_error_and_the_stream_goes_on(
        agent: Agent) -> None:
    stream = Stream(agent.uds)
    try:
        stream.client.async_stream_infer("count", request(2, fail=True), request_id="bad",
                                         enable_empty_final_response=True)
        stream.client.async_stream_infer("count", request(1), request_id="good",
                                         enable_empty_final_response=True)
        got = stream.take(5)
    finally:
        stream.close()
    assert [e for _, e in got[:2]] == [None, None]
    error = got[2][1]
    assert isinstance(error, InferenceServerException)
    assert "'count'" in str(error) and "counting:count" in str(error)
    assert "gave up mid-stream" in str(error) and "after 2 response" in str(error)
    good, end = got[3][0], got[4][0]
    assert good.get_response().id == "good" and not final(good)
    assert final(end) and end.get_response().id == "good"
    # other models keep serving
    with grpcclient.InferenceServerClient(agent.tcp) as client:
        x = np.ones((1, 4), np.float32)
        inp = grpcclient.InferInput("X", [1, 4], "FP32")
        inp.set_data_from_numpy(x)
        np.testing.assert_array_equal(client.infer("fail", [inp]).as_numpy("Y"), x * 2)


def test_a_decoupled_function_that_returns_instead_of_yielding_is_named(agent: Agent) -> None:
    stream = Stream(agent.tcp)
    try:
        stream.client.async_stream_infer("plain", request(1), request_id="p")
        ((_, error),) = stream.take(1)
    finally:
        stream.close()
    assert error is not None and "not a generator" in str(error) and "'plain'" in str(error)


def test_unary_infer_on_a_decoupled_model_is_refused_clearly(agent: Agent) -> None:
    with grpcclient.InferenceServerClient(agent.tcp) as client:
        with pytest.raises(InferenceServerException) as err:
            client.infer("count", request(1))
        assert "decoupled" in str(err.value) and "ModelStreamInfer" in str(err.value)
        config = client.get_model_config("count", as_json=True)["config"]
        assert config["model_transaction_policy"]["decoupled"] is True
        # the refusal changed nothing: the stream still serves
    stream = Stream(agent.tcp)
    try:
        stream.client.async_stream_infer("count", request(1), request_id="after")
        ((result, error),) = stream.take(1)
    finally:
        stream.close()
    assert error is None and result.get_response().id == "after"


def test_an_abandoned_stream_frees_the_instance(agent: Agent) -> None:
    stream = Stream(agent.tcp)
    stream.client.async_stream_infer("count", request(1_000_000), request_id="long")
    stream.take(1)
    stream.close(cancel=True)  # the caller leaves mid-stream
    again = Stream(agent.tcp)
    try:
        again.client.async_stream_infer("count", request(2), request_id="next")
        got = again.take(2)
    finally:
        again.close()
    assert [r.get_response().id for r, _ in got] == ["next", "next"]


@pytest.mark.parametrize("model", list(TALLIES))
def test_a_cancelled_stream_stops_its_generator_and_counts_cancelled(
        agent: Agent, tally_logs: Path, model: str) -> None:
    """The caller cancels mid-stream: the model's generator is closed (in a runtime process:
    the process is told to stop it; in the agent: closed) long before its million responses,
    and the request counts as cancelled (and failed, as Triton counts it)."""
    log = tally_logs / TALLIES[model]
    before = agent.dataplane.statistics(model)[0]
    stream = Stream(agent.tcp)
    stream.client.async_stream_infer(model, request(1_000_000), request_id="long")
    taken = stream.take(3)
    stream.close(cancel=True)  # the caller cancels mid-stream
    assert [error for _, error in taken] == [None] * 3
    produced = int(eventually(lambda: log.exists() and log.read_text(), timeout=120,
                              message=f"{model}'s generator was never closed"))
    assert 3 <= produced < 10_000, produced  # 10 ms a response: it stopped, it did not finish
    after = eventually(lambda: (s := agent.dataplane.statistics(model)[0]).cancel.count
                       > before.cancel.count and s, timeout=120,
                       message="the cancelled stream was never counted")
    assert (after.cancel.count - before.cancel.count, after.fail.count - before.fail.count,
            after.success.count - before.success.count) == (1, 1, 0)


def test_a_pipeline_step_on_a_decoupled_model_is_refused_at_deploy(
        agent: Agent, built: Built, tmp_path: Path) -> None:
    spec = tmp_path / "streamer.toml"
    spec.write_text(textwrap.dedent('''\
        name = "streamer"
        kind = "pipeline"
        max_batch_size = 4
        [[inputs]]
        name = "X"
        datatype = "FP32"
        shape = [4]
        [[outputs]]
        name = "Y"
        datatype = "FP32"
        shape = [4]
        [[steps]]
        model = "count"
        inputs = { X = "X" }
        outputs = { Y = "Y" }
        '''))
    result = agent.deploy(build(spec, 1, tmp_path / "out", built.private_key))
    assert not result.ok
    assert "step 1 (model 'count') is decoupled" in result.message


def test_a_generator_that_hangs_mid_stream_is_cancelled_and_replaced(agent: Agent) -> None:
    stream = Stream(agent.tcp)
    try:
        stream.client.async_stream_infer("stall", request(1, fail=True), request_id="hung")
        stream.client.async_stream_infer("stall", request(1), request_id="fine")
        got = stream.take(4)
    finally:
        stream.close()
    assert got[0][1] is None and got[0][0].get_response().id == "hung"
    error = got[1][1]
    assert error is not None and "'stall'" in str(error)
    assert "no response within the execution timeout (1.5 s)" in str(error)
    assert [r.get_response().id for r, e in got[2:] if e is None] == ["fine", "fine"]


def _stats(client: grpcclient.InferenceServerClient, model: str) -> dict[str, Any]:
    stats = client.get_inference_statistics(model, as_json=True)["model_stats"]
    (mine,) = [s for s in stats if s["version"] == "1"]
    return dict(mine)


def _count(stats: dict[str, Any], key: str) -> int:
    return int(stats["inference_stats"].get(key, {}).get("count", 0))


def test_streamed_requests_are_counted_in_the_model_statistics(agent: Agent) -> None:
    """Each stream request counts once in ModelStatistics, as Triton counts a decoupled
    request: a success when its last response is out, a failure when it fails mid-stream."""
    with grpcclient.InferenceServerClient(agent.tcp) as client:
        before = _stats(client, "count")
        stream = Stream(agent.tcp)
        try:
            stream.client.async_stream_infer("count", request(3), request_id="s1",
                                             enable_empty_final_response=True)
            stream.client.async_stream_infer("count", request(2), request_id="s2",
                                             enable_empty_final_response=True)
            stream.client.async_stream_infer("count", request(1, fail=True), request_id="f",
                                             enable_empty_final_response=True)
            got = stream.take(3 + 1 + 2 + 1 + 1 + 1)  # data + final, data + final, 1 + error
        finally:
            stream.close()
        assert sum(error is not None for _, error in got) == 1
        after = _stats(client, "count")
    assert _count(after, "success") - _count(before, "success") == 2
    assert _count(after, "fail") - _count(before, "fail") == 1
    assert int(after.get("inference_count", 0)) - int(before.get("inference_count", 0)) == 2
    assert int(after.get("execution_count", 0)) - int(before.get("execution_count", 0)) == 2
    assert _count(after, "compute_infer") - _count(before, "compute_infer") == 2
    assert int(after["last_inference"]) > 0
