"""A deploy the agent would refuse is refused before the upload (CheckDeploy), with the same
rules and words as the deploy pipeline, and a message that names the flag that fixes it.

Real agents (in-process, real gRPC on 127.0.0.1), real signed/unsigned bundles; the console's
scripting deploy and its staged rollout (the TUI's deploy screen) ask before every upload.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from console.commands import read_bundles
from console.config import ConsoleSettings
from console.connections import Connections
from console.fleet import FleetAgent
from console.rollout.staged import Phase, Rollout
from edge_agent.client.agent_client import AgentClient
from packager.build import build_bundles
from packager.bundle.signing import generate_keypair
from tests.console_cli.conftest import console
from tests.support.bundles import PROFILE, Bundles
from tests.support.harness import InProcessAgent, sections, start_agent, trusted_agent


@dataclass
class Odd:
    """Bundles the agent must refuse for a reason of their own."""

    other_signer: Path  # mlp version 2, signed by a key the agent does not trust
    other_content: Path  # mlp version 1 again, but another model (other weights)


@pytest.fixture(scope="module")
def odd(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory) -> Odd:
    root = tmp_path_factory.mktemp("odd")
    private, _ = generate_keypair(root / "stranger")
    (other_signer,) = build_bundles(bundles.sources[2], name="mlp", version=2,
                                    profiles=[PROFILE], out_dir=root / "stranger-out",
                                    key_path=private, dynamic_batch=True)
    (other_content,) = build_bundles(bundles.sources[3], name="mlp", version=1,
                                     profiles=[PROFILE], out_dir=root / "clash",
                                     key_path=bundles.private_key, dynamic_batch=True)
    return Odd(other_signer, other_content)


@pytest.fixture(scope="module")
def agent(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[InProcessAgent]:
    """Trusts the test key, does not allow unsigned bundles, serves mlp version 1."""
    with trusted_agent(tmp_path_factory.mktemp("check") / "state", bundles.public_key,
                       deploy=bundles.mlp[1]) as running:
        yield running


def _history(running: InProcessAgent) -> list[int]:
    with AgentClient(running.management, token=running.token) as c:
        return [d.id for d in c.deployments()]


def test_each_refusal_names_its_fix_and_matches_the_pipeline(
        agent: InProcessAgent, bundles: Bundles, odd: Odd) -> None:
    cases = [  # bundle, refusal, words the message must hold (the fix)
        (bundles.unsigned, "unsigned", "--allow-unsigned"),
        (odd.other_signer, "untrusted_key", "--trust"),
        (bundles.arm64, "incompatible", "arm64"),
        (odd.other_content, "version_conflict", "higher version"),
        (bundles.mlp[1], "already_active", "--force"),
    ]
    with AgentClient(agent.management, token=agent.token) as client:
        before = [d.id for d in client.deployments()]
        for bundle, refusal, fix in cases:
            check = client.check_deploy(bundle)
            assert check is not None and not check.ok, bundle
            assert check.refusal == refusal, check
            assert fix in check.message, check.message
            assert check.message.count(bundle.name) <= 1, check.message  # never twice
        assert [d.id for d in client.deployments()] == before  # asking changes nothing
        for bundle, _refusal, _fix in cases:  # the pipeline refuses with the same words
            check = client.check_deploy(bundle)
            result = client.deploy(bundle)
            assert not result.ok and check is not None
            assert result.message.endswith(check.message), (result.message, check.message)
        fine = client.check_deploy(bundles.mlp[2])
        assert fine is not None and fine.ok, fine
        assert (fine.model, fine.version, fine.backend) == ("mlp", 2, "onnxruntime")
        assert fine.key_id and "signed by key" in fine.message
        forced = client.check_deploy(bundles.mlp[1], force=True)
        assert forced is not None and forced.ok, forced


def test_an_agent_without_trust_says_to_give_it_a_key(bundles: Bundles,
                                                        tmp_path: Path) -> None:
    options = sections("no-trust")
    running = start_agent(tmp_path / "state", options)
    try:
        with AgentClient(running.management, token=running.token) as client:
            check = client.check_deploy(bundles.mlp[1])
            assert check is not None and not check.ok and check.refusal == "no_trust"
            assert "--trust" in check.message and "trusts no signing key" in check.message
            unsigned = client.check_deploy(bundles.unsigned)
            assert unsigned is not None and unsigned.refusal == "unsigned"
    finally:
        running.stop()


def test_edge_console_deploy_refuses_before_the_upload(agent: InProcessAgent,
                                                       bundles: Bundles, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(agent.token)
    before = _history(agent)
    run = console(None, "deploy", str(bundles.unsigned), "--agent", agent.management,
                  "--token-file", str(token), "--insecure")  # the in-process agent: plaintext
    assert run.code == 1 and run.err.count("\n") == 1, run.err
    assert "refused before the upload" in run.err and "--allow-unsigned" in run.err
    assert "received" not in run.out  # no upload, so no pipeline step
    as_json = console(None, "deploy", str(bundles.arm64), str(bundles.unsigned), "--agent",
                      agent.management, "--token-file", str(token), "--json", "--insecure")
    assert as_json.code == 1
    assert sorted(r["refusal"] for r in as_json.json()) == ["incompatible", "unsigned"]
    assert _history(agent) == before


def test_the_rollout_refuses_an_agent_before_any_upload(bundles: Bundles, odd: Odd,
                                                         tmp_path: Path) -> None:
    with trusted_agent(tmp_path / "a", bundles.public_key, name="alpha") as alpha, \
            trusted_agent(tmp_path / "b", bundles.public_key, name="beta",
                          deploy=odd.other_content) as beta:
        before = {a.management: _history(a) for a in (alpha, beta)}
        settings = ConsoleSettings(discovery=False, tokens={alpha.management: alpha.token,
                                                            beta.management: beta.token},
                                   insecure=True)  # the in-process agents serve plaintext
        targets = []
        for running, name in ((alpha, "alpha"), (beta, "beta")):
            host, port = running.management.rsplit(":", 1)
            targets.append(FleetAgent(key=running.management, name=name, host=host,
                                      port=int(port)))
        reports = []
        rollout = Rollout(Connections(settings), read_bundles([bundles.mlp[1]]), targets,
                          canary=alpha.management, soak_s=0.0, report=reports.append)
        outcome = rollout.run()
        assert not outcome.ok and "refused on beta" in outcome.message, outcome.message
        refused = outcome.targets[beta.management]
        assert refused.phase is Phase.REFUSED
        assert "refused before the upload" in refused.message
        assert "different content" in refused.message
        assert refused.sent == 0
        assert outcome.targets[alpha.management].phase is Phase.DONE
        assert _history(beta) == before[beta.management]


@pytest.mark.parametrize("manifest", [b"", b"[]", b"\xff\xfe", b"[" * 100_000 + b"]" * 100_000,
                                      b'{"format_version": 1, "name": "a", "version": "x"}'])
def test_a_hostile_manifest_is_refused_as_invalid(agent: InProcessAgent,
                                                  manifest: bytes) -> None:
    from edge_agent.management.generated import management_pb2 as pb
    from edge_agent.management.generated import management_pb2_grpc as pb_grpc

    with AgentClient(agent.management, token=agent.token) as client:
        stub = pb_grpc.AgentManagementStub(client._channel)
        reply = stub.CheckDeploy(pb.CheckDeployRequest(manifest=manifest, size_bytes=100),
                                 metadata=client._metadata, timeout=30)
    assert not reply.ok and reply.refusal in ("invalid_bundle", "too_large"), reply
    assert reply.message and "Traceback" not in reply.message


def test_an_agent_that_predates_check_deploy_is_not_asked(bundles: Bundles) -> None:
    """A real gRPC server that answers GetInfo only (the generated base class answers every
    other call UNIMPLEMENTED, as an older agent does for CheckDeploy)."""
    from concurrent import futures

    import grpc

    from edge_agent.management.generated import management_pb2 as pb
    from edge_agent.management.generated import management_pb2_grpc as pb_grpc

    class OldAgent(pb_grpc.AgentManagementServicer):
        def GetInfo(self, request, context):  # type: ignore[no-untyped-def]
            return pb.AgentInfo(name="old", arch="x86_64", api_version="v1")

    server = grpc.server(futures.ThreadPoolExecutor(2))
    pb_grpc.add_AgentManagementServicer_to_server(OldAgent(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with AgentClient(f"127.0.0.1:{port}", token="t") as client:
            assert client.check_deploy(bundles.mlp[1]) is None
            assert client.info().name == "old"
    finally:
        server.stop(0).wait()
