"""A bundle built with ``--response-cache`` opts its model into the cache (unless agent.toml
says otherwise), and hits and misses reach the management API and ``edge-console status``:
real bundles, a real data plane, a real agent on 127.0.0.1 port 0, real console processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import grpc
import numpy as np
import pytest

from edge_agent.cli import main as agent_cli
from edge_agent.config.models import ModelOverrides
from edge_agent.core.dataplane import DataPlane
from edge_agent.core.types import InferRequest
from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb
from edge_agent.frontends.grpc.generated import grpc_service_pb2_grpc as pb_grpc
from packager.bundle.reader import open_bundle
from tests.fastpath.conftest import ORT, MlpBundles
from tests.support.cli import console
from tests.support.core_bundles import install
from tests.support.harness import sections, start_agent

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def opted_in(tmp_path_factory: pytest.TempPathFactory, mlp_bundles: MlpBundles) -> Path:
    """mlp v1 built with ``edge-pack build --response-cache`` (the real CLI)."""
    out = tmp_path_factory.mktemp("opted-in")
    run = subprocess.run(
        [sys.executable, "-m", "packager.cli", "build", str(mlp_bundles.v1_onnx), "--name", "mlp",
         "--version", "1", "--profile", ORT, "--out", str(out), "--dynamic-batch",
         "--response-cache", "--quiet"], cwd=ROOT, capture_output=True, text=True, timeout=300,
        check=False)
    assert run.returncode == 0, run.stderr
    (bundle,) = out.glob("*.edgepkg")
    return bundle


def _manifest_json(bundle: Path) -> dict[str, object]:
    with open_bundle(bundle) as reader:  # the signed bytes, as stored
        return json.loads(reader.manifest_bytes)  # type: ignore[no-any-return]


def test_the_flag_is_recorded_in_the_manifest_and_absent_otherwise(
        opted_in: Path, mlp_bundles: MlpBundles) -> None:
    with open_bundle(opted_in) as reader:
        assert reader.manifest.response_cache is True
    assert _manifest_json(opted_in)["response_cache"] is True
    with open_bundle(mlp_bundles.v1) as reader:  # canonical bytes of a bundle without it
        assert reader.manifest.response_cache is False
    assert "response_cache" not in _manifest_json(mlp_bundles.v1)


def test_a_spec_build_refuses_the_flag(tmp_path: Path) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text("name = 'x'\n")
    run = subprocess.run(
        [sys.executable, "-m", "packager.cli", "build", str(spec), "--version", "1",
         "--profile", ORT, "--out", str(tmp_path / "out"), "--response-cache"], cwd=ROOT,
        capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode != 0 and "--response-cache" in run.stderr
    assert "apply to ONNX models" in run.stderr


@pytest.mark.parametrize(("overrides", "hits"), [({}, 3), ({"mlp": ModelOverrides(
    response_cache=False)}, 0)], ids=["bundle-opts-in", "agent-toml-says-no"])
def test_the_agent_honours_the_bundle_unless_its_config_overrides(
        tmp_path: Path, opted_in: Path, overrides: dict[str, ModelOverrides], hits: int) -> None:
    install(opted_in, tmp_path / "state")
    dp = DataPlane(tmp_path / "state", overrides=overrides, response_cache_bytes=1 << 20)
    try:
        x = np.ones((1, 64), np.float32)
        for _ in range(4):
            dp.infer(InferRequest("mlp", {"input": x}))
        (stats,) = dp.statistics("mlp")
        assert stats.cache_hit.count == hits
    finally:
        dp.close()


def test_hits_and_hit_rate_in_list_models_and_console_status(
        tmp_path: Path, opted_in: Path, mlp_bundles: MlpBundles) -> None:
    state = tmp_path / "state"
    assert agent_cli(["add-bundle", "--state-dir", str(state), "--allow-unsigned",
                      str(opted_in)]) == 0
    agent = start_agent(state, sections("cache-agent"),
                        workers=4, response_cache_bytes=1 << 20)
    try:
        x = np.full((1, 64), 0.5, np.float32)
        request = pb.ModelInferRequest(model_name="mlp")
        request.inputs.add(name="input", datatype="FP32", shape=[1, 64])
        request.raw_input_contents.append(x.tobytes())
        with grpc.insecure_channel(agent.grpc) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            for _ in range(4):  # one miss, three hits
                stub.ModelInfer(request, timeout=60)
        with agent.client() as client:
            (v,) = client.models("mlp")
        assert (v.response_cache, v.cache_hits, v.cache_misses) == (True, 3, 1)
        assert v.cache_hit_rate == 0.75
        token = tmp_path / "token"
        token.write_text(agent.token + "\n")
        args = ("--agent", agent.management, "--token-file", str(token), "--insecure")
        table = console(None, "status", *args)
        assert table.code == 0, table.err
        assert "response cache" in table.out and "3 hits (75%)" in table.out
        (status,) = console(None, "status", "--json", *args).json()
        (listed,) = status["versions"]
        assert (listed["cache_hits"], listed["cache_misses"]) == (3, 1)
    finally:
        agent.stop()
