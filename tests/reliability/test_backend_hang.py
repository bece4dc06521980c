"""A backend that hangs inside an inference (a real ONNX Loop of 10^15 trips on a hot input),
on a real agent process with ``execution_timeout_ms`` set for that model: the request ends with
DEADLINE_EXCEEDED naming the timeout, the run is stopped and the instance is replaced (the
model's only instance serves the next request), and callers of another model see nothing.
ONNX Runtime cancels the run in-process; OpenVINO cannot, so its instance runs in a runtime
process of its own (isolation "auto") that is killed and restarted. A runtime process that
crashes (a real SIGSEGV) fails the execution in flight with UNAVAILABLE and is restarted."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import psutil
import pytest

from edge_agent.client.agent_client import AgentClient
from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb
from edge_agent.frontends.grpc.generated import grpc_service_pb2_grpc as pb_grpc
from packager.build import build_bundles
from tests.reliability.models import HOT, make_hang_model
from tests.support.bundles import Bundles
from tests.support.eventually import eventually
from tests.support.harness import AgentProcess
from tests.support.processes import command_line
from tests.support.traffic import Bystander, infer_request


@contextlib.contextmanager
def _serving_mlp_and_hang(bundles: Bundles, tmp_path: Path, profile: str,
                          config_text: str) -> Iterator[AgentProcess]:
    """A real agent process with ``config_text`` as agent.toml, serving ``mlp`` (ORT) and the
    hang model built for ``profile``."""
    (hang,) = build_bundles(make_hang_model(tmp_path / "h.onnx"), name="hang", version=1,
                            profiles=[profile], out_dir=tmp_path / "out",
                            key_path=bundles.private_key, dynamic_batch=True)
    config = tmp_path / "agent.toml"
    config.write_text(config_text)
    state = tmp_path / "state"
    with AgentProcess(state, trust=bundles.public_key,
                      extra=["--no-mdns", "--config", str(config)]) as agent:
        token = (state / "management.token").read_text().strip()
        with AgentClient(agent.management, token=token) as client:
            assert client.deploy(bundles.mlp[1]).ok
            assert client.deploy(hang).ok
        yield agent


@pytest.mark.slow
@pytest.mark.parametrize("profile", ["x86_64-cpu-onnxruntime", "x86_64-cpu-openvino"])
def test_a_hung_inference_times_out_and_its_instance_is_replaced(
        bundles: Bundles, tmp_path: Path, profile: str) -> None:
    with _serving_mlp_and_hang(bundles, tmp_path, profile, "[models.hang]\ninstances = 1\n"
                               "execution_timeout_ms = 1500\n") as agent:
        with Bystander(agent.grpc) as bystander, \
                grpc.insecure_channel(agent.grpc) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            hot = np.zeros((1, 64), np.float32)
            hot[0, 0] = HOT * 2
            calm = np.ones((1, 64), np.float32)
            for _ in range(3):  # more than the model's one instance
                with pytest.raises(grpc.RpcError) as err:
                    stub.ModelInfer(infer_request("hang", hot), timeout=120)  # far past 1.5 s
                assert err.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
                details = err.value.details() or ""
                assert "hang" in details and "1.5 s" in details, details
                reply = stub.ModelInfer(infer_request("hang", calm), timeout=120)
                assert np.frombuffer(reply.raw_output_contents[0], np.float32).shape == (10,)
        assert bystander.ok > 0 and not bystander.failures, bystander.failures[:3]
        with grpc.insecure_channel(agent.grpc) as channel:
            stats = pb_grpc.GRPCInferenceServiceStub(channel).ModelStatistics(
                pb.ModelStatisticsRequest(name="hang"), timeout=30)
        assert stats.model_stats[0].inference_stats.fail.count == 3


def _runtime_processes(agent_pid: int, model: str) -> list[psutil.Process]:
    return [p for p in psutil.Process(agent_pid).children()
            if "edge_agent.backends.runtime_process" in command_line(p)
            and command_line(p)[-1].startswith(f"{model}:")]


@pytest.mark.slow
def test_a_crashed_runtime_process_fails_its_request_and_is_restarted(
        bundles: Bundles, tmp_path: Path) -> None:
    # every model in runtime processes ([models."*"]); hang's own section adds to that
    with _serving_mlp_and_hang(bundles, tmp_path, "x86_64-cpu-openvino",
                               '[models."*"]\nisolation = "process"\n'
                               "[models.hang]\ninstances = 1\n") as agent:
        assert agent.proc is not None
        (runtime,) = _runtime_processes(agent.proc.pid, "hang")
        assert _runtime_processes(agent.proc.pid, "mlp")  # the ORT model is isolated too
        busy_before = sum(runtime.cpu_times()[:2])
        with Bystander(agent.grpc) as bystander, \
                grpc.insecure_channel(agent.grpc) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            hot = np.zeros((1, 64), np.float32)
            hot[0, 0] = HOT * 2
            call = stub.ModelInfer.future(infer_request("hang", hot), timeout=120)

            def spinning() -> bool:  # inside the endless Loop
                assert not call.done()
                return sum(runtime.cpu_times()[:2]) - busy_before >= 0.5

            eventually(spinning, timeout=60, message="the runtime never ran the endless Loop")
            os.kill(runtime.pid, signal.SIGSEGV)
            with pytest.raises(grpc.RpcError) as err:
                call.result(timeout=60)
            assert err.value.code() is grpc.StatusCode.UNAVAILABLE, err.value.details()
            details = err.value.details() or ""
            assert "hang" in details and "SIGSEGV" in details and "retry" in details, details
            calm = np.ones((1, 64), np.float32)
            reply = stub.ModelInfer(infer_request("hang", calm), timeout=120)
            assert np.frombuffer(reply.raw_output_contents[0], np.float32).shape == (10,)
        assert bystander.ok > 0 and not bystander.failures, bystander.failures[:3]
