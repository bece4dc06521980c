"""Deploy-time rules of pipelines on a real agent: members must be served and fit the wiring;
after a restart a pipeline comes back after the models it calls."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient

from tests.pipelines.conftest import EXAMPLE, Built, build, running_agent
from tests.support.eventually import eventually

import imaging  # isort: skip  (examples/pipeline, on the path through the conftest)


def pipeline_spec(tmp_path: Path, old: str, new: str, name: str = "classify") -> Path:
    text = (EXAMPLE / "classify.toml").read_text()
    assert old in text
    path = tmp_path / f"{name}.toml"
    path.write_text(text.replace(old, new, 1).replace('name = "classify"', f'name = "{name}"'))
    return path


def test_members_must_be_served_and_fit_the_wiring(built: Built, tmp_path: Path) -> None:
    with running_agent(tmp_path / "agent", built.public_key) as agent, agent.client() as c:
        assert c.deploy(built.bundles["mlp"]).ok
        result = c.deploy(built.bundles["classify"])
        assert not result.ok
        assert "step 1 (model 'prep') is not served on this agent" in result.message
        assert not any(v.model == "classify" and v.active for v in c.models())
        for name in ("prep", "post"):
            assert c.deploy(built.bundles[name]).ok
        wrong_type = build(pipeline_spec(tmp_path, 'inputs = { input = "features" }',
                                         'inputs = { input = "IMAGE" }'), 2,
                           tmp_path / "a", built.private_key)
        result = c.deploy(wrong_type)
        assert not result.ok
        assert "step 2 (model 'mlp')" in result.message
        assert "datatype BYTES does not match FP32" in result.message
        unwired = build(pipeline_spec(tmp_path, 'model = "post"', 'model = "mlp"'), 3,
                        tmp_path / "b", built.private_key)
        result = c.deploy(unwired)
        assert not result.ok and "has no input 'PROBS'" in result.message
        assert c.deploy(built.bundles["classify"]).ok


def test_a_pipeline_comes_back_after_its_members_when_the_agent_restarts(
        built: Built, tmp_path: Path) -> None:
    state = tmp_path / "agent"
    # "aaa" sorts before its members: the agent must still load it after them
    first = build(pipeline_spec(tmp_path, 'name = "classify"', 'name = "classify"', "aaa"), 1,
                  tmp_path / "a", built.private_key)
    with running_agent(state, built.public_key) as agent:
        for name in ("mlp", "prep", "post"):
            assert agent.deploy(built.bundles[name]).ok
        assert agent.deploy(first).ok
    with running_agent(state, built.public_key) as agent, \
            grpcclient.InferenceServerClient(agent.tcp) as client:
        assert client.is_model_ready("aaa")
        data = np.array([[imaging.encode(np.zeros((10, 10), np.uint8))]], dtype=object)
        inp = grpcclient.InferInput("IMAGE", [1, 1], "BYTES")
        inp.set_data_from_numpy(data)
        labels = client.infer("aaa", [inp]).as_numpy("LABELS")
        assert labels.shape == (1, 3) and all(isinstance(x, bytes) for x in labels[0])


def test_hot_swap_of_a_member_under_pipeline_load_fails_no_request(
        built: Built, tmp_path: Path) -> None:
    pinned = build(pipeline_spec(tmp_path, 'model = "mlp"', 'model = "mlp"\nversion = 1',
                                 "pinned"), 1, tmp_path / "a", built.private_key)
    batch = np.array([[imaging.encode(np.full((12, 9), i * 20, np.uint8))] for i in range(3)],
                     dtype=object)
    with running_agent(tmp_path / "agent", built.public_key) as agent:
        for name in ("mlp", "prep", "post", "classify"):
            assert agent.deploy(built.bundles[name]).ok
        assert agent.deploy(pinned).ok
        stop = threading.Event()
        done: list[int] = []
        failures: list[str] = []

        def load() -> None:
            with grpcclient.InferenceServerClient(agent.tcp) as client:
                inp = grpcclient.InferInput("IMAGE", [3, 1], "BYTES")
                inp.set_data_from_numpy(batch)
                while not stop.is_set():
                    try:
                        client.infer("classify", [inp], client_timeout=60)
                        done.append(1)
                    except Exception as exc:  # counted: the assertion says which
                        failures.append(str(exc))

        threads = [threading.Thread(target=load) for _ in range(4)]
        for t in threads:
            t.start()
        try:
            eventually(lambda: len(done) >= 20, message="no traffic before the deploy")
            assert agent.deploy(built.bundles["mlp2"]).ok
            seen = len(done)
            eventually(lambda: len(done) >= seen + 20, message="no traffic after the deploy")
        finally:
            stop.set()
            for t in threads:
                t.join(60)
        assert failures == [] and len(done) >= 40
        with grpcclient.InferenceServerClient(agent.tcp) as client:
            stats = client.get_inference_statistics("mlp", "2", as_json=True)["model_stats"]
            assert int(stats[0]["inference_count"]) > 0


def test_a_pinned_member_version_cannot_be_removed(built: Built, tmp_path: Path) -> None:
    pinned = build(pipeline_spec(tmp_path, 'model = "mlp"', 'model = "mlp"\nversion = 1',
                                 "pinned"), 1, tmp_path / "a", built.private_key)
    with running_agent(tmp_path / "agent", built.public_key) as agent, agent.client() as c:
        for name in ("mlp", "prep", "post"):
            assert c.deploy(built.bundles[name]).ok
        assert c.deploy(pinned).ok
        assert c.deploy(built.bundles["mlp2"]).ok
        try:
            result = c.remove("mlp", 1)
            message = result.message
            refused = not result.ok
        except Exception as exc:  # the client raises for a FAILED_PRECONDITION
            message, refused = str(exc), True
        assert refused and "pinned by the pipeline pinned version 1" in message
        assert {v.version for v in c.models() if v.model == "mlp"} == {1, 2}
