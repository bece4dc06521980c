"""Asynchronous and streaming BLS on a real agent: ``ctx.infer_async`` fans out to two children
that must run at the same time, ``ctx.stream`` takes a decoupled child's responses, from a
Python model in the agent's process and in a runtime process; a parent whose caller leaves
takes its children with it."""

from __future__ import annotations

import itertools
import queue
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from edge_agent.config.models import ModelOverrides
from tests.pipelines.branching import bundles
from tests.pipelines.conftest import Agent, Built, running_agent
from tests.support.eventually import eventually

MODELS = {
    "meet_a": ("meet_a", ("X",), ""), "meet_b": ("meet_b", ("X",), ""),
    "slow": ("slow", ("X",), ""), "count": ("count", ("X",), "decoupled = true"),
    "fan": ("fan", ("X",), ""), "fan_inproc": ("fan", ("X",), ""),
    "gather": ("gather", ("X",), ""), "gather_inproc": ("gather", ("X",), ""),
    "listen": ("listen", ("X",), ""), "listen_inproc": ("listen", ("X",), ""),
    "patient": ("patient", ("X",), ""), "patient_inproc": ("patient", ("X",), ""),
    "ticker": ("ticker", ("X",), "decoupled = true"),
    "first": ("first", ("X",), ""), "first_inproc": ("first", ("X",), ""),
    "patient_stream": ("patient_stream", ("X",), "decoupled = true"),
    "patient_stream_inproc": ("patient_stream", ("X",), "decoupled = true"),
}
"""The children, and each parent twice: in a runtime process and in the agent's process."""

RUNS = itertools.count(1)


@pytest.fixture(scope="module")
def meet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the models announce themselves (and the ticker writes its tallies)."""
    return tmp_path_factory.mktemp("meet")


@pytest.fixture(scope="module")
def agent(built: Built, meet: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    src = tmp_path_factory.mktemp("bls-async")
    made = bundles(src, built, meet, MODELS)
    inproc = {name: ModelOverrides(isolation="thread") for name in MODELS
              if name.endswith("_inproc")}
    with running_agent(tmp_path_factory.mktemp("agent"), built.public_key, models=inproc,
                       max_concurrent_executions=4) as running:
        for bundle in made:
            result = running.deploy(bundle)
            assert result.ok, result.message
        yield running


def call(url: str, model: str, x: np.ndarray, timeout_s: float = 120) -> np.ndarray:
    with grpcclient.InferenceServerClient(url) as client:
        inp = grpcclient.InferInput("X", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        out = client.infer(model, [inp], client_timeout=timeout_s).as_numpy("Y")
        assert out is not None
        return out


def stats(url: str, model: str) -> dict[str, int]:
    """The model's execution count and how many of its requests finished."""
    with grpcclient.InferenceServerClient(url) as client:
        (s,) = client.get_inference_statistics(model, as_json=True)["model_stats"]
    infer = s.get("inference_stats", {})
    return {"executions": int(s.get("execution_count", 0)),
            "finished": sum(int(infer.get(k, {}).get("count", 0))
                            for k in ("success", "fail"))}


@pytest.mark.parametrize("parent", ["fan", "fan_inproc"])
def test_infer_async_runs_two_children_at_once(agent: Agent, parent: str) -> None:
    x = np.array([1.5, next(RUNS), -2.0, 4.0], np.float32)
    # meet_a answers 2x and meet_b 3x, each only once the other has started
    np.testing.assert_allclose(call(agent.tcp, parent, x), 5 * x)


@pytest.mark.parametrize("parent", ["gather", "gather_inproc"])
def test_infer_async_futures_are_awaitable_in_asyncio(agent: Agent, parent: str) -> None:
    x = np.array([2.5, next(RUNS), 1.0, -1.0], np.float32)
    # asyncio.wrap_future on both; each child answers only once the other has started
    np.testing.assert_allclose(call(agent.uds, parent, x), 5 * x)


@pytest.mark.parametrize("parent", ["listen", "listen_inproc"])
def test_stream_takes_every_response_of_a_decoupled_child(agent: Agent, parent: str) -> None:
    x = np.array([4.0, 1.0, 2.0, -3.0], np.float32)
    # count yields x + 0, x + 1, x + 2, x + 3
    np.testing.assert_allclose(call(agent.uds, parent, x), 4 * x + 6)


@pytest.mark.parametrize("parent", ["first", "first_inproc"])
def test_leaving_a_stream_early_stops_the_decoupled_child(agent: Agent, meet: Path,
                                                          parent: str) -> None:
    run = next(RUNS)
    x = np.array([7.0, run, 0.0, 1.0], np.float32)
    np.testing.assert_allclose(call(agent.tcp, parent, x), x)  # the first response: x + 0
    tally = meet / f"ticker-{run}"
    eventually(tally.exists, message="the ticker's generator never ended")
    assert int(tally.read_text()) < 50  # stopped, not run to its end


@pytest.mark.parametrize("parent", ["patient", "patient_inproc"])
def test_a_cancelled_parent_cancels_its_children(agent: Agent, parent: str) -> None:
    before = stats(agent.tcp, "slow")["executions"]
    done = stats(agent.tcp, parent)["finished"]
    x = np.ones(4, np.float32)
    with pytest.raises(InferenceServerException) as err:
        call(agent.tcp, parent, x, timeout_s=1.0)  # ten 0.3 s children: about 3 fit
    assert "Deadline" in str(err.value) or "DEADLINE" in str(err.value)
    eventually(lambda: stats(agent.tcp, parent)["finished"] > done,
               message=f"{parent}'s request never finished")
    ran = stats(agent.tcp, "slow")["executions"] - before
    assert 1 <= ran < 10, f"{ran} of the 10 children ran (the caller left after about 3)"


@pytest.mark.parametrize("parent", ["patient_stream", "patient_stream_inproc"])
def test_a_cancelled_decoupled_parent_cancels_its_children(agent: Agent, parent: str) -> None:
    before = stats(agent.tcp, "slow")["executions"]
    done = stats(agent.tcp, parent)["finished"]
    errors: queue.Queue[InferenceServerException | None] = queue.Queue()
    inp = grpcclient.InferInput("X", [4], "FP32")
    inp.set_data_from_numpy(np.ones(4, np.float32))
    with grpcclient.InferenceServerClient(agent.tcp) as client:
        # the stream's deadline passes while the parent is in its ten 0.3 s children
        client.start_stream(lambda result, error: errors.put(error), stream_timeout=1.0)
        client.async_stream_infer(parent, [inp])
        error = errors.get(timeout=120)
        client.stop_stream()
    assert error is not None and "deadline" in str(error).lower(), error
    eventually(lambda: stats(agent.tcp, parent)["finished"] > done,
               message=f"{parent}'s request never finished")
    ran = stats(agent.tcp, "slow")["executions"] - before
    assert 1 <= ran < 10, f"{ran} of the 10 children ran (the caller left after about 3)"


def test_ctx_infer_async_and_stream_need_an_agent(tmp_path: Path) -> None:
    from edge_agent.backends.python_backend import ModelContext
    from edge_agent.errors import BackendError

    ctx = ModelContext("alone", 1)
    with pytest.raises(BackendError, match="needs the agent's data plane"):
        ctx.infer_async("m", {})
    with pytest.raises(BackendError, match="needs the agent's data plane"):
        next(iter(ctx.stream("m", {})))
