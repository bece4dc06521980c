"""What ServerMetadata and ModelConfig say is what the agent does: the extension list follows
the model-control setting, and the instance kind follows the device the backend runs on."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import tritonclient.grpc as tc

from edge_agent.client.agent_client import AgentClient
from edge_agent.core.api import ModelConfigInfo
from edge_agent.frontends.grpc.converters import to_model_config
from tests.support.bundles import Bundles
from tests.support.harness import sections, start_agent


@pytest.mark.parametrize("control", [False, True])
def test_server_metadata_lists_what_is_served(tmp_path: Path, bundles: Bundles,
                                              control: bool) -> None:
    options = sections("meta", bundles.public_key)
    agent = start_agent(tmp_path / "state", options, repository_control=control)
    try:
        with AgentClient(agent.management, token=agent.token) as client:
            assert client.deploy(bundles.mlp[1]).ok
        with tc.InferenceServerClient(agent.grpc) as triton:
            extensions = set(triton.get_server_metadata().extensions)
            # system shared memory: not over TCP unless [grpc] tcp_shared_memory = true
            assert extensions == {"classification", "sequence", "schedule_policy",
                                  "model_configuration", "statistics", "logging", "trace"} | (
                {"model_repository"} if control else set())
            assert "binary_tensor_data" not in extensions  # an HTTP extension: not served here
            group = triton.get_model_config("mlp").config.instance_group[0]
            assert group.kind == tc.model_config_pb2.ModelInstanceGroup.KIND_CPU
            assert list(group.gpus) == []
    finally:
        agent.stop()


@pytest.mark.parametrize(("device", "gpu"), [
    ("CPUExecutionProvider", False), ("CUDAExecutionProvider", True),
    ("TensorrtExecutionProvider", True), ("cuda:0 (Orin)", True), ("GPU", True),
    ("CPU", False), ("AUTO", False)])
def test_instance_kind_follows_the_backend_device(bundles: Bundles, device: str,
                                                   gpu: bool) -> None:
    from packager.bundle.reader import open_bundle

    with open_bundle(bundles.mlp[1]) as reader:
        manifest = reader.manifest
    info = ModelConfigInfo(manifest=manifest, backend="onnxruntime", instances=2)
    group = to_model_config(dataclasses.replace(info, device=device)).instance_group[0]
    kind = group.KIND_GPU if gpu else group.KIND_CPU
    assert (group.kind, list(group.gpus), group.count) == (kind, [0] if gpu else [], 2)
