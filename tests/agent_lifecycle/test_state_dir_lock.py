"""One agent per state directory (issue 17): real agent processes on one state dir.

A second ``edge-agent serve`` and ``add-bundle`` are refused, naming the PID that holds the
lock, while the first agent's deploy is in flight; the deploy then completes. After ``kill -9``
of the holder the kernel frees the lock and a new agent takes over. ``metrics`` and ``token``
keep working beside a running agent.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import grpc
import numpy as np

from edge_agent.client import convert
from edge_agent.client.agent_client import AgentClient
from edge_agent.client.types import DeployResult
from edge_agent.management.auth import bearer
from edge_agent.management.generated import management_pb2 as pb
from edge_agent.management.generated import management_pb2_grpc as pb_grpc
from tests.support.bundles import Bundles
from tests.support.eventually import eventually
from tests.support.harness import ROOT, AgentProcess

X = np.random.default_rng(5).standard_normal((2, 64)).astype(np.float32)


def agent_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m edge_agent.cli ARGS`` in a subprocess."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "edge_agent.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def one_error_line(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 1, (out.stdout, out.stderr)
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, out.stderr
    return lines[0]


def _token(state: Path) -> str:
    return (state / "management.token").read_text().strip()


def _serves(agent: AgentProcess, bundles: Bundles, version: int) -> None:
    import tritonclient.grpc as tc

    with tc.InferenceServerClient(agent.grpc) as triton:
        inp = tc.InferInput("input", [2, 64], "FP32")
        inp.set_data_from_numpy(X)
        result = triton.infer("mlp", [inp])
    assert result.get_response().model_version == str(version)
    np.testing.assert_allclose(result.as_numpy("probs"), bundles.reference(version, X),
                               rtol=1e-4, atol=1e-5)


class HeldUpload:
    """A Deploy stream that sends the header and a first chunk, then waits for ``release``."""

    def __init__(self, target: str, token: str, bundle: Path) -> None:
        self.data = bundle.read_bytes()
        self.name = bundle.name
        self.target, self.token = target, token
        self.release = threading.Event()
        self.results: list[DeployResult] = []
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _requests(self):  # type: ignore[no-untyped-def]
        yield pb.DeployRequest(header=pb.DeployHeader(filename=self.name,
                                                      size_bytes=len(self.data)))
        yield pb.DeployRequest(chunk=self.data[:1024])
        self.release.wait(300)
        yield pb.DeployRequest(chunk=self.data[1024:])

    def _run(self) -> None:
        try:
            with grpc.insecure_channel(self.target) as channel:
                stub = pb_grpc.AgentManagementStub(channel)
                for event in stub.Deploy(self._requests(), metadata=bearer(self.token),
                                         timeout=300):
                    if event.WhichOneof("event") == "result":
                        self.results.append(convert.deploy_result(event.result))
        except BaseException as exc:  # reported by the test
            self.errors.append(exc)


def _wait_for_upload(state: Path, agent: AgentProcess) -> list[Path]:
    incoming = state / "incoming"

    def found() -> list[Path]:
        assert agent.proc is not None and agent.proc.poll() is None, "".join(agent.output)
        return sorted(incoming.iterdir()) if incoming.is_dir() else []

    return eventually(found, timeout=120, message="the upload never reached the agent")


def test_a_second_agent_is_refused_during_a_deploy_and_takes_over_after_kill_9(
        bundles: Bundles, tmp_path: Path) -> None:
    state = tmp_path / "state"
    with AgentProcess(state, trust=bundles.public_key) as first:
        assert first.proc is not None
        upload = HeldUpload(first.management, _token(state), bundles.mlp[1])
        upload.thread.start()
        try:
            uploads = _wait_for_upload(state, first)
            second = agent_cli("serve", "--state-dir", str(state), "--grpc", "127.0.0.1:0",
                               "--no-uds", "--management", "127.0.0.1:0", "--no-mdns",
                               "--trust", str(bundles.public_key))
            line = one_error_line(second)
            assert f"state directory {state} is in use by edge-agent serve " \
                   f"(PID {first.proc.pid})" in line
            assert "stop it first" in line
            # the refused agent touched nothing: the upload in flight is still there
            assert all(p.exists() for p in uploads)
        finally:
            upload.release.set()
        upload.thread.join(300)
        assert not upload.errors, upload.errors
        assert [r.ok for r in upload.results] == [True], upload.results
        _serves(first, bundles, 1)
        assert (state / "agent.lock").read_text().split() == [str(first.proc.pid), "serve"]
        os.kill(first.proc.pid, signal.SIGKILL)  # kill -9 of the lock holder itself
        first.proc.wait(60)
        first.kill()  # anything else left in its process group
    with AgentProcess(state, trust=bundles.public_key) as successor, \
            AgentClient(successor.management, token=_token(state)) as client:
        assert successor.proc is not None
        assert [(v.model, v.version, v.active) for v in client.models()] == [("mlp", 1, True)]
        _serves(successor, bundles, 1)
        assert (state / "agent.lock").read_text().split()[0] == str(successor.proc.pid)
        assert client.deploy(bundles.mlp[2]).ok
        _serves(successor, bundles, 2)


def test_add_bundle_is_refused_beside_a_running_agent_and_read_only_commands_work(
        bundles: Bundles, tmp_path: Path) -> None:
    state = tmp_path / "state"
    with AgentProcess(state, trust=bundles.public_key) as agent:
        assert agent.proc is not None
        with AgentClient(agent.management, token=_token(state)) as client:
            assert client.deploy(bundles.mlp[1]).ok
        refused = agent_cli("add-bundle", "--state-dir", str(state), "--pubkey",
                            str(bundles.public_key), str(bundles.mlp[2]))
        line = one_error_line(refused)
        assert f"in use by edge-agent serve (PID {agent.proc.pid})" in line
        assert "edge-console deploy" in line
        assert sorted(p.name for p in (state / "models" / "mlp").iterdir()) == ["1"]
        token = agent_cli("token", "--state-dir", str(state))
        assert token.returncode == 0, token.stderr
        assert token.stdout.strip() == _token(state)
        metrics = agent_cli("metrics", "--state-dir", str(state))
        assert metrics.returncode == 0, metrics.stderr
        assert "error" not in metrics.stderr
        _serves(agent, bundles, 1)
    installed = agent_cli("add-bundle", "--state-dir", str(state), "--pubkey",
                          str(bundles.public_key), str(bundles.mlp[2]))
    assert installed.returncode == 0, installed.stderr
    assert "installed mlp version 2" in installed.stdout
    assert (state / "agent.lock").read_text() == ""  # released, no stale PID left behind


def test_add_bundle_refuses_another_arch_with_the_message_deploy_gives(
        bundles: Bundles, tmp_path: Path) -> None:
    state = tmp_path / "state"
    with AgentProcess(state, trust=bundles.public_key) as agent, \
            AgentClient(agent.management, token=_token(state)) as client:
        deployed = client.deploy(bundles.arm64)
    assert not deployed.ok
    prefix = "verified failed: "
    assert deployed.message.startswith(prefix), deployed.message
    rule = deployed.message.removeprefix(prefix)
    assert "arm64-cpu-onnxruntime" in rule
    out = agent_cli("add-bundle", "--state-dir", str(state), "--pubkey",
                    str(bundles.public_key), str(bundles.arm64))
    assert one_error_line(out) == f"edge-agent add-bundle: error: {rule}"
    assert not (state / "models" / "mlp" / "4").exists()
