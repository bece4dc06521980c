"""A member version pinned by a served pipeline stays: a deploy of a newer member version keeps
it loaded, retention does not prune it, KServe RepositoryModelUnload and removal refuse it."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from edge_agent.config.models import ModelOverrides
from packager.build import build_bundles
from packager.samples import make_mlp
from tests.pipelines.conftest import PROFILE, Built, build, running_agent
from tests.pipelines.test_pipeline_deploy import pipeline_spec

import imaging  # isort: skip  (examples/pipeline, on the path through the conftest)

BATCH = np.array([[imaging.encode(np.full((12, 9), i * 30, np.uint8))] for i in range(2)],
                 dtype=object)


def labels(url: str, model: str) -> np.ndarray:
    with grpcclient.InferenceServerClient(url) as client:
        inp = grpcclient.InferInput("IMAGE", [2, 1], "BYTES")
        inp.set_data_from_numpy(BATCH)
        return client.infer(model, [inp], client_timeout=120).as_numpy("SCORES")


def mlp_versions_on_disk(state_dir: Path) -> set[int]:
    return {int(p.name) for p in (state_dir / "models" / "mlp").iterdir() if p.name.isdigit()}


def test_a_pinned_member_version_survives_deploys_retention_and_unload(
        built: Built, tmp_path: Path) -> None:
    pinned = build(pipeline_spec(tmp_path, 'model = "mlp"', 'model = "mlp"\nversion = 1',
                                 "pinned"), 1, tmp_path / "a", built.private_key)
    (mlp3,) = build_bundles(make_mlp(tmp_path / "mlp3.onnx", seed=7), name="mlp", version=3,
                            profiles=[PROFILE], out_dir=tmp_path / "b",
                            key_path=built.private_key, dynamic_batch=True)
    state = tmp_path / "agent"
    with running_agent(state, built.public_key, keep_versions=1,
                       repository_control=True) as agent, agent.client() as c:
        for name in ("mlp", "prep", "post", "classify"):
            assert c.deploy(built.bundles[name]).ok
        assert c.deploy(pinned).ok
        on_v1 = labels(agent.tcp, "pinned")
        np.testing.assert_array_equal(labels(agent.tcp, "classify"), on_v1)
        for bundle in (built.bundles["mlp2"], mlp3):
            result = c.deploy(bundle)
            assert result.ok, result.message
        # the pinned version still serves its pipeline; the other follows the active version
        np.testing.assert_array_equal(labels(agent.uds, "pinned"), on_v1)
        assert not np.array_equal(labels(agent.uds, "classify"), on_v1)
        # keep_versions = 1 keeps the active version 3 and the rollback target 2, and the
        # pinned version 1 beyond the limit
        assert mlp_versions_on_disk(state) == {1, 2, 3}
        with grpcclient.InferenceServerClient(agent.tcp) as client:
            with pytest.raises(InferenceServerException) as err:
                client.unload_model("mlp")
            assert "StatusCode.FAILED_PRECONDITION" in str(err.value.status())
            assert "mlp version 1 is a step pinned by the pipeline pinned version 1" \
                in str(err.value)
            assert client.is_model_ready("mlp", "1") and client.is_model_ready("mlp", "3")
        np.testing.assert_array_equal(labels(agent.tcp, "pinned"), on_v1)
        with pytest.raises(Exception, match="pinned by the pipeline pinned version 1"):
            result = c.remove("mlp", 1)
            assert result.ok, result.message
        # once the pipeline is gone, the member unloads like any model
        with grpcclient.InferenceServerClient(agent.tcp) as client:
            client.unload_model("pinned")
            client.unload_model("mlp")
            assert not client.is_model_ready("mlp", "3")


def test_the_idle_sweep_keeps_a_version_a_pipeline_pins(built: Built, tmp_path: Path) -> None:
    pinned = build(pipeline_spec(tmp_path, 'model = "mlp"', 'model = "mlp"\nversion = 1',
                                 "pinned"), 1, tmp_path / "a", built.private_key)
    state = tmp_path / "agent"
    idle = {"mlp": ModelOverrides(idle_unload_s=0.2)}
    with running_agent(state, built.public_key, models=idle) as agent, agent.client() as c:
        for name in ("mlp", "prep", "post", "classify"):
            assert c.deploy(built.bundles[name]).ok
        assert c.deploy(pinned).ok
        on_v1 = labels(agent.tcp, "pinned")
        orchestrator = agent.dataplane.orchestrator
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:  # sweeps well past idle_unload_s
            orchestrator.sweep()
            time.sleep(0.1)
        with grpcclient.InferenceServerClient(agent.tcp) as client:
            assert client.is_model_ready("mlp", "1"), "a pinned member was unloaded when idle"
        np.testing.assert_array_equal(labels(agent.tcp, "pinned"), on_v1)
