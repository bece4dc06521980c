"""CUDA shared memory on a CPU-only agent, through the unmodified tritonclient (gRPC and
HTTP): registering is refused with the agent's message; status lists no region and
unregister (one region or all) succeeds, as a CPU-only Triton answers, so clients that clean
up both kinds of shared memory run unchanged."""

from __future__ import annotations

import pytest
import tritonclient.grpc as tg
import tritonclient.http as th
from tritonclient.utils import InferenceServerException

from tests.shmwords.conftest import Agent

REFUSAL = "CUDA shared memory is not served by this agent"


def test_grpc_status_and_unregister_answer_with_no_region(agent: Agent) -> None:
    with tg.InferenceServerClient(agent.grpc) as client:
        client.unregister_cuda_shared_memory()
        client.unregister_cuda_shared_memory("never_registered")
        assert list(client.get_cuda_shared_memory_status(as_json=True).get("regions", {})) == []
        assert list(client.get_cuda_shared_memory_status("never_registered").regions) == []


def test_http_status_and_unregister_answer_with_no_region(agent: Agent) -> None:
    client = th.InferenceServerClient(agent.http)
    try:
        client.unregister_cuda_shared_memory()
        client.unregister_cuda_shared_memory("never_registered")
        assert client.get_cuda_shared_memory_status() == []
        assert client.get_cuda_shared_memory_status("never_registered") == []
    finally:
        client.close()


def test_grpc_register_is_refused_with_the_agents_advice(agent: Agent) -> None:
    with tg.InferenceServerClient(agent.grpc) as client, \
            pytest.raises(InferenceServerException) as err:
        client.register_cuda_shared_memory("gpu_region", b"\0" * 64, 0, 64)
    assert str(err.value.status()) == "StatusCode.UNIMPLEMENTED"
    assert REFUSAL in err.value.message() and "system shared memory" in err.value.message()


def test_http_register_is_refused_with_the_agents_advice(agent: Agent) -> None:
    client = th.InferenceServerClient(agent.http)
    try:
        with pytest.raises(InferenceServerException) as err:
            client.register_cuda_shared_memory("gpu_region", b"\0" * 64, 0, 64)
        assert REFUSAL in err.value.message()
    finally:
        client.close()
