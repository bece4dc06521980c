"""Load on demand, unload when idle, pinned models, version policy: real CNNs, real agents."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import tritonclient.grpc as tc
from tritonclient.utils import InferenceServerException

from edge_agent.config.models import ModelOverrides
from edge_agent.metrics.summary import summary_json
from tests.orchestration.agents import client, infer_cnn, running_agent
from tests.orchestration.conftest import CnnBundles
from tests.support.cli import console
from tests.support.eventually import eventually

ON_DEMAND = ModelOverrides(load="on-demand", isolation="thread")


def _deploy(state: Path, bundles: CnnBundles, *paths: Path) -> None:
    with running_agent(state, bundles.public_key) as agent, client(agent) as c:
        for path in paths:
            result = c.deploy(path)
            assert result.ok, result


def test_on_demand_model_is_listed_not_ready_and_concurrent_first_requests_share_one_load(
        tmp_path: Path, cnn_bundles: CnnBundles) -> None:
    state = tmp_path / "state"
    _deploy(state, cnn_bundles, cnn_bundles.cnn["squeezenet"])
    with running_agent(state, cnn_bundles.public_key,
                       models={"squeezenet": ON_DEMAND}) as agent, \
            tc.InferenceServerClient(agent.grpc) as triton, client(agent) as c:
        assert not triton.is_model_ready("squeezenet")
        index = triton.get_model_repository_index(as_json=True)["models"]
        (entry,) = [m for m in index if m["name"] == "squeezenet"]
        assert entry["state"] == "UNAVAILABLE" and "on-demand" in entry["reason"]
        meta = triton.get_model_metadata("squeezenet", as_json=True)  # from the manifest
        assert meta["versions"] == ["1"] and meta["inputs"][0]["name"] == "data_0"
        assert not triton.is_model_ready("squeezenet")  # describing it loads nothing
        stats = triton.get_inference_statistics("squeezenet", as_json=True)
        assert not stats.get("model_stats")  # listed, nothing counted yet
        start = threading.Barrier(6)
        shapes: list[tuple[int, ...]] = []
        errors: list[BaseException] = []

        def first_request() -> None:
            with tc.InferenceServerClient(agent.grpc) as own:
                start.wait(60)
                try:
                    shapes.append(infer_cnn(own, "squeezenet"))
                except BaseException as exc:  # collected for the assertion
                    errors.append(exc)

        threads = [threading.Thread(target=first_request) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        assert not errors and len(shapes) == 6
        assert triton.is_model_ready("squeezenet")
        index = triton.get_model_repository_index(as_json=True)["models"]
        (entry,) = [m for m in index if m["name"] == "squeezenet"]
        assert entry["state"] == "READY" and "loaded on request: 1 load(s)" in entry["reason"]
        (view,) = [v for v in c.models("squeezenet") if v.active]
        assert view.loads == 1 and view.load_mode == "on-demand"
        assert view.load_waits >= 1 and view.residency == "loaded"


def test_a_request_that_outwaits_load_timeout_gets_unavailable_naming_the_reason(
        tmp_path: Path, cnn_bundles: CnnBundles) -> None:
    state = tmp_path / "state"
    _deploy(state, cnn_bundles, cnn_bundles.cnn["squeezenet"])
    impatient = ModelOverrides(load="on-demand", isolation="thread", load_timeout_ms=1)
    with running_agent(state, cnn_bundles.public_key,
                       models={"squeezenet": impatient}) as agent, \
            tc.InferenceServerClient(agent.grpc) as triton:
        with pytest.raises(InferenceServerException) as err:
            infer_cnn(triton, "squeezenet")
        assert err.value.status() == "StatusCode.UNAVAILABLE"
        assert "load_timeout_ms=1" in err.value.message()
        eventually(lambda: triton.is_model_ready("squeezenet"),
                   message="timed out waiting for the load to finish anyway")
        assert infer_cnn(triton, "squeezenet")[0] == 1


def test_idle_model_is_unloaded_and_reloaded_while_a_pinned_one_stays(
        tmp_path: Path, cnn_bundles: CnnBundles) -> None:
    state = tmp_path / "state"
    _deploy(state, cnn_bundles, cnn_bundles.cnn["squeezenet"], cnn_bundles.cnn["shufflenet"])
    idle = ModelOverrides(isolation="thread", idle_unload_s=1.0)
    pinned = ModelOverrides(isolation="thread", idle_unload_s=1.0, pinned=True)
    with running_agent(state, cnn_bundles.public_key,
                       models={"squeezenet": idle, "shufflenet": pinned}) as agent, \
            tc.InferenceServerClient(agent.grpc) as triton, client(agent) as c:
        infer_cnn(triton, "shufflenet")  # the pinned one is used first: it is idle longer
        infer_cnn(triton, "squeezenet")
        eventually(lambda: not triton.is_model_ready("squeezenet"),
                   message="timed out waiting for the idle unload")
        assert triton.is_model_ready("shufflenet"), "a pinned model was unloaded"
        (view,) = [v for v in c.models("squeezenet") if v.active]
        assert view.unloads == 1 and "idle" in view.residency
        assert infer_cnn(triton, "squeezenet")[0] == 1  # the next request loads it again
        (view,) = [v for v in c.models("squeezenet") if v.active]
        assert view.loads == 2 and view.load_waits == 1
        (pin,) = [v for v in c.models("shufflenet") if v.active]
        assert pin.pinned and pin.unloads == 0
        # the Prometheus load/unload counters' reasons (docs/prometheus.md)
        tally = {(t.event, t.reason): t.count for t in agent.dataplane.lifecycle()
                 if t.model == "squeezenet"}
        assert tally[("load", "requested")] == 1 and tally[("load", "on-demand")] == 1
        assert tally[("unload", "idle")] >= 1
        residency = {m["model"]: m for m in summary_json(state)["residency"]["models"]}
        assert residency["squeezenet"]["loads"] == 2 and residency["squeezenet"]["waits"] == 1
        assert residency["shufflenet"]["loaded_version"] == 1
        token = tmp_path / "token"
        token.write_text(agent.token + "\n")
        shown = console(None, "status", "--agent", agent.management, "--token-file",
                        str(token), "--insecure")
        assert shown.code == 0, shown.err
        assert "no memory budget" in shown.out and "eager pinned" in shown.out
        # squeezenet: loaded twice, unloaded once (twice if the sweep found it idle again)
        assert re.search(r"\b2/[12]\b", shown.out), shown.out
        table = subprocess.run([sys.executable, "-m", "edge_agent.cli", "metrics",
                                "--state-dir", str(state)], capture_output=True, text=True,
                               timeout=120, check=False)
        assert table.returncode == 0, table.stderr
        assert "models in memory" in table.stdout and "squeezenet" in table.stdout


def test_repository_load_follows_the_version_policy(tmp_path: Path,
                                                    cnn_bundles: CnnBundles) -> None:
    state = tmp_path / "state"
    _deploy(state, cnn_bundles, cnn_bundles.cnn["squeezenet"], cnn_bundles.second["squeezenet"])
    for policy, ready in (("active", {"2"}), ("all", {"1", "2"}), ("specific 1", {"1", "2"})):
        models = {"squeezenet": ModelOverrides(isolation="thread", version_policy=policy)}
        with running_agent(state, cnn_bundles.public_key, models=models,
                           repository_control=True) as agent, \
                tc.InferenceServerClient(agent.grpc) as triton:
            triton.unload_model("squeezenet")
            assert not triton.is_model_ready("squeezenet")
            with pytest.raises(InferenceServerException):  # an operator's unload holds
                infer_cnn(triton, "squeezenet")
            triton.load_model("squeezenet")
            got = {v for v in ("1", "2") if triton.is_model_ready("squeezenet", v)}
            assert got == ready, policy
