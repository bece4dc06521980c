"""Real agents for the orchestration tests: in this process (an Agent on a thread) with an
AgentConfig the test writes, or as a subprocess reading an agent.toml."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import tritonclient.grpc as tc

from edge_agent.client.agent_client import AgentClient
from edge_agent.config import AgentConfig, GrpcConfig, ModelsConfig
from edge_agent.config.models import ModelOverrides
from tests.support.harness import InProcessAgent, run_configured, sections


@contextmanager
def running_agent(state_dir: Path, trust: Path, *, budget_mib: float | None = None,
                  models: Mapping[str, ModelOverrides] | None = None,
                  repository_control: bool = False) -> Iterator[InProcessAgent]:
    """An agent on ``state_dir`` (plaintext management, no mDNS, no watch window) with the
    memory budget and per-model settings given; stopped on exit."""
    options = sections("orch", trust, insecure=True)
    config = AgentConfig(state_dir=state_dir,
                         models=ModelsConfig(overrides=dict(models or {}),
                                             memory_budget_bytes=None if budget_mib is None
                                             else int(budget_mib * (1 << 20))),
                         grpc=GrpcConfig(address="127.0.0.1:0", uds_enabled=False, workers=16,
                                         repository_control=repository_control))
    agent = run_configured(config, options, timeout_s=180, name="orch-agent")
    try:
        yield agent
    finally:
        agent.stop()


def client(agent: InProcessAgent) -> AgentClient:
    return AgentClient(agent.management, token=agent.token)


def infer_cnn(triton: tc.InferenceServerClient, model: str) -> tuple[int, ...]:
    """One request to a light CNN (1x3x224x224 zeros); the output's shape."""
    import numpy as np

    name = "gpu_0/data_0" if model.startswith("shufflenet") else "data_0"
    inp = tc.InferInput(name, [1, 3, 224, 224], "FP32")
    inp.set_data_from_numpy(np.zeros((1, 3, 224, 224), np.float32))
    result = triton.infer(model, [inp], client_timeout=300)
    response = result.get_response()
    return tuple(response.outputs[0].shape)


def memory_of(agent_client: AgentClient, model: str) -> int:
    """The memory figure the agent's budget uses for ``model``'s active version."""
    (view,) = [v for v in agent_client.models(model) if v.active]
    return view.memory_bytes
