"""The management API of a real agent (management + inference gRPC on 127.0.0.1), through the
Python client library, with tritonclient load during swaps."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest

from edge_agent.client.agent_client import AgentClient, AuthenticationError, ManagementError
from edge_agent.management.generated import management_pb2 as pb
from edge_agent.management.generated import management_pb2_grpc as pb_grpc
from tests.support.bundles import Bundles
from tests.support.eventually import eventually
from tests.support.harness import InProcessAgent, trusted_agent

INPUTS = [np.random.default_rng(i).standard_normal((1, 64)).astype(np.float32)
          for i in range(8)]


@pytest.fixture(scope="module")
def agent(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessAgent]:
    with trusted_agent(tmp_path_factory.mktemp("api") / "state", bundles.public_key,
                       name="api-test") as running:
        yield running


@pytest.fixture(scope="module")
def client(agent: InProcessAgent) -> Iterator[AgentClient]:
    with AgentClient(agent.management, token=agent.token) as c:
        yield c


@pytest.fixture(scope="module")
def deployed(client: AgentClient, bundles: Bundles) -> AgentClient:
    result = client.deploy(bundles.mlp[1])
    assert result.ok, result.message
    return client


def test_get_info_and_list_models(deployed: AgentClient, agent: InProcessAgent) -> None:
    info = deployed.info()
    assert info.name == "api-test" and info.arch == "x86_64" and info.api_version == "1"
    assert "onnxruntime" in info.runtimes and info.profile.startswith("x86_64-")
    assert info.inference_address == agent.grpc and info.uptime_s > 0
    assert (agent.state_dir / "agent-id").read_text().strip() == info.agent_id
    versions = {v.version: v for v in deployed.models("mlp")}
    assert versions[1].active and versions[1].state == "READY"
    assert versions[1].load_ms and versions[1].load_ms > 0


def test_token_file_is_private(agent: InProcessAgent) -> None:
    token_file = agent.state_dir / "management.token"
    assert token_file.stat().st_mode & 0o777 == 0o600
    assert token_file.read_text().strip() == agent.token


@pytest.mark.parametrize("token", [None, "wrong-token"])
def test_wrong_or_missing_token_is_unauthenticated_and_changes_nothing(
        deployed: AgentClient, agent: InProcessAgent, bundles: Bundles,
        token: str | None) -> None:
    before_history = [d.id for d in deployed.deployments()]
    before_models = deployed.models()
    with AgentClient(agent.management, token=token) as intruder:
        for call in (intruder.info, intruder.models, intruder.deployments,
                     lambda: intruder.deploy(bundles.mlp[2]),
                     lambda: intruder.check_deploy(bundles.mlp[2]),
                     lambda: intruder.rollback("mlp"),
                     lambda: intruder.activate("mlp", 1, force=True),
                     lambda: intruder.remove("mlp", 1),
                     lambda: intruder.query_metrics("mlp"),
                     lambda: next(intruder.watch_metrics())):
            with pytest.raises(AuthenticationError, match="token"):
                call()
    # the raw status code, from a plain stub
    with grpc.insecure_channel(agent.management) as channel:
        stub = pb_grpc.AgentManagementStub(channel)
        with pytest.raises(grpc.RpcError) as err:
            stub.GetInfo(pb.GetInfoRequest(), timeout=10)
        assert err.value.code() is grpc.StatusCode.UNAUTHENTICATED
    assert [d.id for d in deployed.deployments()] == before_history
    assert deployed.models() == before_models
    assert not any((agent.state_dir / "incoming").iterdir())


def test_refused_bundle_says_which_profile_the_device_runs(deployed: AgentClient,
                                                          bundles: Bundles) -> None:
    steps = []
    result = deployed.deploy(bundles.arm64, on_step=steps.append)
    assert not result.ok
    info = deployed.info()
    assert f"this device runs profile {info.profile}" in result.message
    assert steps[-1].step == "verified" and not steps[-1].ok
    assert result.deployment is not None and result.deployment.status == "failed"
    assert [v.version for v in deployed.models("mlp") if v.active] == [1]


def test_ten_swaps_and_a_reload_under_load_fail_no_request(
        deployed: AgentClient, agent: InProcessAgent, bundles: Bundles) -> None:
    import tritonclient.grpc as tc

    refs = {v: [bundles.reference(v, x) for x in INPUTS] for v in (1, 2)}
    stop = threading.Event()
    seen: Counter[int] = Counter()
    problems: list[str] = []
    lock = threading.Lock()

    def load(worker: int) -> None:
        client = tc.InferenceServerClient(agent.grpc)
        n = worker
        try:
            while not stop.is_set():
                i = n % len(INPUTS)
                n += 1
                inp = tc.InferInput("input", [1, 64], "FP32")
                inp.set_data_from_numpy(INPUTS[i])
                try:
                    result = client.infer("mlp", [inp])
                except Exception as exc:  # any failure is a finding
                    with lock:
                        problems.append(f"request failed: {exc}")
                    continue
                version = int(result.get_response().model_version)
                out = result.as_numpy("probs")
                if version not in refs or not np.allclose(out, refs[version][i], rtol=1e-4,
                                                          atol=1e-5):
                    with lock:
                        problems.append(f"version {version} answered with other outputs")
                with lock:
                    seen[version] += 1
        finally:
            client.close()

    def served_by(version: int) -> None:
        """Wait until the load threads get answers from ``version`` after this call."""
        with lock:
            mark = seen[version]

        def answered() -> bool:
            with lock:
                return seen[version] > mark or bool(problems)

        eventually(answered, timeout=60, interval=0.02,
                   message=lambda: f"version {version} never answered: {seen}")

    threads = [threading.Thread(target=load, args=(w,), daemon=True) for w in range(8)]
    for t in threads:
        t.start()
    try:
        served_by(1)
        for _ in range(5):
            up = deployed.deploy(bundles.mlp[2])
            assert up.ok, up.message
            served_by(2)
            down = deployed.rollback("mlp")
            assert down.ok, down.message
            served_by(1)
        reload = deployed.activate("mlp", 1, force=True)  # a fresh copy, swapped in
        assert reload.ok, reload.message
        served_by(1)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert problems == []
    assert seen[1] > 0 and seen[2] > 0, seen
    kinds = [d.kind for d in deployed.deployments("mlp", limit=11)]
    assert kinds == ["activate"] + ["rollback", "deploy"] * 5


def test_query_and_watch_metrics(deployed: AgentClient, agent: InProcessAgent) -> None:
    import tritonclient.grpc as tc

    watch = deployed.watch_metrics("mlp")
    with tc.InferenceServerClient(agent.grpc) as triton:
        inp = tc.InferInput("input", [1, 64], "FP32")
        inp.set_data_from_numpy(INPUTS[0])

        def sampled() -> Any:
            triton.infer("mlp", [inp])
            sample = next(watch)
            return sample if sample.points else None

        sample = eventually(sampled, timeout=30, interval=0,
                            message="the watch never carried a model point")
    watch.close()
    assert sample is not None and sample.points and sample.points[0].model == "mlp"
    assert sample.system is not None and sample.system["rss_bytes"] > 0
    # written once a second, off the hot path
    eventually(lambda: sum(p.requests for p in deployed.query_metrics(
        "mlp", start=time.time() - 600, step_s=1)), timeout=30, interval=0.2,
        message="no stored requests of mlp")
    per_version = deployed.query_metrics("mlp", start=time.time() - 600, step_s=60,
                                         per_version=True)
    assert {p.version for p in per_version} >= {1}


def test_remove_and_force_reload(deployed: AgentClient) -> None:
    with pytest.raises(ManagementError, match="active"):
        deployed.remove("mlp", 1)
    reload = deployed.activate("mlp", 1, force=True)
    assert reload.ok and reload.active_version == 1
    gone = deployed.remove("mlp", 2)
    assert gone.ok
    assert [v.version for v in deployed.models("mlp")] == [1]


def test_unknown_version_is_not_found(deployed: AgentClient, tmp_path: Path) -> None:
    with pytest.raises(ManagementError) as err:
        deployed.activate("mlp", 42)
    assert err.value.status == "NOT_FOUND" and "no version 42" in str(err.value)
    junk = tmp_path / "junk.edgepkg"
    junk.write_bytes(b"not a bundle")
    with pytest.raises(ManagementError) as err:
        deployed.deploy(junk)
    assert err.value.status == "INVALID_ARGUMENT" and "not a valid bundle" in str(err.value)


def test_upload_reports_progress_in_chunks(deployed: AgentClient, bundles: Bundles,
                                           tmp_path: Path) -> None:
    from packager.build import build_bundles
    from packager.samples import make_mlp

    src = make_mlp(tmp_path / "wide.onnx", hidden=8192, seed=4)  # ~2 MiB of weights
    (bundle,) = build_bundles(src, name="wide", version=1, profiles=["x86_64-cpu-onnxruntime"],
                              out_dir=tmp_path / "out", key_path=bundles.private_key,
                              dynamic_batch=True)
    progress: list[tuple[int, int]] = []
    result = deployed.deploy(bundle, on_progress=lambda got, total: progress.append((got, total)))
    assert result.ok, result.message
    size = bundle.stat().st_size
    assert len(progress) >= 3 and progress[-1] == (size, size)
    assert [got for got, _ in progress] == sorted(got for got, _ in progress)
    assert any(v.model == "wide" and v.active for v in deployed.models())
