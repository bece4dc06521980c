"""Real agents for the console tests: the agent's own main loop (inference gRPC, management
gRPC with a token, mDNS bound to 127.0.0.1 only) on a thread, ports from the OS."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edge_agent.config import AgentConfig, GrpcConfig
from edge_agent.management.agent_main import run_agent
from edge_agent.management.runtime import AgentRuntime, ManagementOptions
from packager.build import build_bundles
from packager.samples import make_mlp
from packager.signing import generate_keypair
from tests.agent_management.models import make_fragile_model

PROFILE = "x86_64-cpu-onnxruntime"
LOOPBACK = ("127.0.0.1",)
START_DEADLINE_S = 60.0


@dataclass
class BundleSet:
    """MLP bundles: versions 1 and 2 signed for this machine's profile, version 2 also for
    arm64, an unsigned version 3 and a fragile version 4."""

    public_key: Path
    mlp: dict[int, Path]
    arm64: Path
    unsigned: Path
    fragile: Path  # version 4: passes warm-up and probe, fails requests holding values >= 21


def build_test_bundles(root: Path) -> BundleSet:
    """Build the bundles with edge-pack's library (a few seconds)."""
    private, public = generate_keypair(root / "keys")
    out = root / "bundles"
    mlp: dict[int, Path] = {}
    src: dict[int, Path] = {}
    for version, seed in ((1, 11), (2, 22)):
        src[version] = make_mlp(root / f"mlp-{version}.onnx", seed=seed, hidden=16)
        (mlp[version],) = build_bundles(src[version], name="mlp", version=version,
                                        profiles=[PROFILE], out_dir=out, key_path=private,
                                        dynamic_batch=True)
    (arm64,) = build_bundles(src[2], name="mlp", version=2, profiles=["arm64-cpu-onnxruntime"],
                             out_dir=out, key_path=private, dynamic_batch=True)
    (unsigned,) = build_bundles(src[1], name="mlp", version=3, profiles=[PROFILE],
                                out_dir=root / "unsigned", dynamic_batch=True)
    (fragile,) = build_bundles(make_fragile_model(root / "fragile.onnx"), name="mlp", version=4,
                               profiles=[PROFILE], out_dir=out, key_path=private,
                               dynamic_batch=True)
    return BundleSet(public_key=public, mlp=mlp, arm64=arm64, unsigned=unsigned,
                     fragile=fragile)


@dataclass
class RunningAgent:
    """One agent running on a thread of this process; :meth:`stop` ends it."""

    name: str
    state_dir: Path
    thread: threading.Thread
    stop_event: threading.Event
    runtime: AgentRuntime | None = None
    error: BaseException | None = None
    ready: threading.Event = field(default_factory=threading.Event)

    @property
    def address(self) -> str:
        """HOST:PORT of the management API."""
        assert self.runtime is not None and self.runtime.management_address
        return self.runtime.management_address

    @property
    def token(self) -> str:
        """The management token."""
        assert self.runtime is not None
        return self.runtime.token

    @property
    def agent_id(self) -> str:
        """The agent's id (as advertised)."""
        assert self.runtime is not None and self.runtime.identity is not None
        return self.runtime.identity.agent_id

    def stop(self) -> None:
        """Withdraw the advert, stop the servers, wait for the thread."""
        self.stop_event.set()
        self.thread.join(30)


def start_agent(root: Path, name: str, public_key: Path, *, mdns: bool = True,
                profile: str = PROFILE) -> RunningAgent:
    """Start an agent called ``name`` with its state under ``root / name``."""
    state_dir = root / name
    config = AgentConfig(state_dir=state_dir,
                         grpc=GrpcConfig(address="127.0.0.1:0", uds_enabled=False, workers=4))
    options = ManagementOptions(address="127.0.0.1:0", name=name, trusted_keys=(public_key,),
                                mdns=mdns, mdns_interfaces=LOOPBACK, profile=profile)
    stop = threading.Event()
    agent = RunningAgent(name=name, state_dir=state_dir, thread=threading.Thread(),
                         stop_event=stop)

    def on_ready(_addresses: Any, _dataplane: Any, runtime: AgentRuntime) -> None:
        agent.runtime = runtime
        agent.ready.set()

    def main() -> None:
        try:
            run_agent(config, options, on_ready=on_ready, stop_event=stop, grace=1.0)
        except BaseException as exc:
            agent.error = exc
            agent.ready.set()

    agent.thread = threading.Thread(target=main, name=f"agent-{name}", daemon=True)
    agent.thread.start()
    if not agent.ready.wait(START_DEADLINE_S) or agent.error is not None:
        agent.stop()
        raise RuntimeError(f"agent {name} did not start: {agent.error!r}")
    return agent

