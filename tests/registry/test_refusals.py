"""DeployReference refusals that need no registry: an agent with the default config refuses
every reference (saying how to allow one), a malformed or unpinned reference is refused, a
wrong token is UNAUTHENTICATED, and nothing changes on the agent."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from edge_agent.client.agent_client import AuthenticationError, ManagementError
from edge_agent.management.generated import management_pb2 as pb
from edge_agent.management.generated import management_pb2_grpc as pb_grpc
from tests.support.bundles import Bundles
from tests.support.harness import InProcessAgent, trusted_agent

PINNED = "oci://registry.local:5000/models/mlp@sha256:" + "ab" * 32


@pytest.fixture
def agent(tmp_path: Path, bundles: Bundles) -> Iterator[InProcessAgent]:
    with trusted_agent(tmp_path / "agent", bundles.public_key, deploy=bundles.mlp[1]) as a:
        yield a


def test_the_default_config_refuses_every_reference(agent: InProcessAgent) -> None:
    with agent.client() as c:
        before = c.deployments()
        with pytest.raises(ManagementError, match=r"pulls from no registry.*\[registry\] "
                           "allow") as err:
            c.deploy_reference(PINNED)
        assert err.value.status == "FAILED_PRECONDITION"
        assert "registry.local:5000/models/mlp" in str(err.value)  # the entry to add
        for bad, says in (("oci://registry.local:5000/models/mlp:1", "not pinned"),
                          ("registry.local:5000/models/mlp:1", "not an OCI reference"),
                          ("oci://registry.local:5000/Models/mlp:1", "lowercase"),
                          ("oci://h/x@sha256:" + "a" * 2000, "at most")):
            with pytest.raises(ManagementError, match=says) as err:
                c.deploy_reference(bad)
            assert err.value.status == "INVALID_ARGUMENT"
        assert c.deployments() == before
        assert [v.version for v in c.models() if v.active] == [1]


def test_a_wrong_token_is_unauthenticated(agent: InProcessAgent) -> None:
    from edge_agent.client.agent_client import AgentClient

    with AgentClient(agent.management, token="wrong") as c, \
            pytest.raises(AuthenticationError):
        c.deploy_reference(PINNED)
    with grpc.insecure_channel(agent.management) as channel:
        stream = pb_grpc.AgentManagementStub(channel).DeployReference(
            pb.DeployReferenceRequest(reference=PINNED), timeout=10)
        with pytest.raises(grpc.RpcError) as err:
            list(stream)
        assert err.value.code() is grpc.StatusCode.UNAUTHENTICATED
