"""Real agents for the console tests: ``edge-agent serve`` processes (inference gRPC,
management gRPC with a token, mDNS bound to 127.0.0.1 only), ports from the OS.

Management is plaintext (``--insecure``; the console apps in these tests pass ``insecure``
too) unless ``tls=True``: these tests are about the UI. TLS and pinning through the console's
connections are tested in tests/agent_management/test_tls.py."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from packager.build import build_bundles
from packager.bundle.signing import generate_keypair
from packager.samples import make_mlp
from tests.support.harness import AgentProcess
from tests.support.models import make_fragile_model, make_nan_model

PROFILE = "x86_64-cpu-onnxruntime"
LOOPBACK = ("127.0.0.1",)
START_DEADLINE_S = 120.0


@dataclass
class BundleSet:
    """MLP bundles: versions 1 and 2 signed for this machine's profile, version 2 also for
    arm64, an unsigned version 3 and a fragile version 4."""

    public_key: Path
    mlp: dict[int, Path]
    arm64: Path
    unsigned: Path
    fragile: Path  # version 4: passes warm-up and probe, fails requests holding values >= 21
    nan: Path  # version 5: passes every check before the upload, fails the health probe


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
    (nan,) = build_bundles(make_nan_model(root / "nan.onnx"), name="mlp", version=5,
                           profiles=[PROFILE], out_dir=out, key_path=private,
                           dynamic_batch=True, allow_parity_failure=True)
    return BundleSet(public_key=public, mlp=mlp, arm64=arm64, unsigned=unsigned,
                     fragile=fragile, nan=nan)


RunningAgent = AgentProcess
"""One ``edge-agent serve`` process (the harness's subprocess mode)."""


def start_agent(root: Path, name: str, public_key: Path, *, mdns: bool = True,
                profile: str = PROFILE, tls: bool = False) -> AgentProcess:
    """Start ``edge-agent serve`` called ``name`` with its state under ``root / name``,
    inference and management on 127.0.0.1 port 0, mDNS (if asked) on 127.0.0.1 only."""
    extra = ["--profile", profile]
    extra += ["--mdns-interface", LOOPBACK[0]] if mdns else ["--no-mdns"]
    return AgentProcess(root / name, trust=public_key, tls=tls, extra=extra,
                        name=name).start(START_DEADLINE_S)
