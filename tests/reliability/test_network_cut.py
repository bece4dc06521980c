"""The network between console and agent is cut mid-upload (a real TCP proxy that resets the
connection): the agent abandons the deploy cleanly (no partial upload, no history entry, the
active version serving) and a retry succeeds."""

from __future__ import annotations

from pathlib import Path

import pytest

from edge_agent.client.agent_client import AgentClient, ManagementError
from packager.build import build_bundles
from packager.samples import make_mlp
from tests.reliability.netcut import CuttingProxy
from tests.support.bundles import PROFILE, Bundles
from tests.support.eventually import eventually
from tests.support.harness import sections, start_agent
from tests.support.traffic import served_version


def test_cut_mid_upload_is_abandoned_and_a_retry_succeeds(bundles: Bundles,
                                                          tmp_path: Path) -> None:
    src = make_mlp(tmp_path / "wide.onnx", hidden=4096, seed=8)
    (big,) = build_bundles(src, name="mlp", version=8, profiles=[PROFILE],
                           out_dir=tmp_path / "out", key_path=bundles.private_key,
                           dynamic_batch=True)
    size = big.stat().st_size
    assert size > 1 << 20
    options = sections("net-cut", bundles.public_key)
    agent = start_agent(tmp_path / "state", options)
    incoming = agent.state_dir / "incoming"
    try:
        with AgentClient(agent.management, token=agent.token) as client:
            assert client.deploy(bundles.mlp[1]).ok
            history = [d.id for d in client.deployments()]
            for cut_after in (size // 3, size * 9 // 10):
                with CuttingProxy(agent.management, cut_after) as proxy, \
                        AgentClient(proxy.address, token=agent.token) as cut_client:
                    progress: list[int] = []
                    with pytest.raises(ManagementError):
                        cut_client.deploy(
                            big, on_progress=lambda got, _t, p=progress: p.append(got))
                    assert proxy.cut.is_set()
                    assert all(got < size for got in progress)  # it was cut mid-upload
                eventually(lambda: not incoming.exists() or not any(incoming.iterdir()),
                           message="the abandoned upload was never cleaned up")
                assert [d.id for d in client.deployments()] == history
                assert sorted(p.name for p in (agent.state_dir / "models" / "mlp").iterdir()) \
                    == ["1"]
                assert [v.version for v in client.models("mlp") if v.active] == [1]
                assert served_version(agent.grpc)[0] == "1"
            result = client.deploy(big)
            assert result.ok, result.message
            assert served_version(agent.grpc)[0] == "8"
    finally:
        agent.stop()
