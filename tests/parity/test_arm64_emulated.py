"""arm64 for real, under qemu-user emulation: the toolkit installed from aarch64 wheels in a
Debian arm64 root file system, driven from the host over loopback.

Prepared and run by ``scripts/arm64-check.sh`` (it builds and caches the root file system,
registers binfmt_misc, mounts /proc with an aarch64 /proc/cpuinfo and sets EDGE_ARM64_ROOT);
skipped, with the reason, anywhere else. What it proves: arm64 Python, wheels and kernels
(ONNX Runtime's Arm kernels, fp32 and int8) agree with the source model, and the agent deploys,
serves, hot-swaps and rolls back there. What it does not: a real board's speed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from packager.build import build_bundles
from packager.bundle.signing import generate_keypair
from packager.samples import make_mlp
from tests.support.harness import AgentProcess

ROOT_ENV = "EDGE_ARM64_ROOT"
VENV = "/opt/edge"
PROFILES = ("arm64-cpu-onnxruntime", "arm64-cpu-onnxruntime-int8")
CHROOT = shutil.which("chroot") or "/usr/sbin/chroot"  # found on the host's PATH
X = np.random.default_rng(17).standard_normal((3, 64)).astype(np.float32)


def _skip_reason() -> str | None:
    root = os.environ.get(ROOT_ENV)
    if not root:
        return f"{ROOT_ENV} is not set: run scripts/arm64-check.sh (qemu-user-static, root)"
    if not Path("/proc/sys/fs/binfmt_misc/qemu-aarch64").exists():
        return "qemu-aarch64 is not registered with binfmt_misc (scripts/arm64-check.sh does it)"
    if not Path(root, VENV.lstrip("/"), "bin", "edge-agent").exists():
        return f"{root} has no {VENV} with the toolkit (scripts/arm64-check.sh installs it)"
    if os.geteuid() != 0:
        return "chroot needs root"
    return None


pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))


@dataclass
class Emulated:
    root: Path  # the arm64 root file system
    work: Path  # ROOT/work on the host; /work inside
    public_key: Path
    sources: dict[int, Path]
    bundles: dict[tuple[int, str], Path]  # (version, profile) -> bundle on the host

    def inside(self, path: Path) -> str:
        return "/" + path.relative_to(self.root).as_posix()

    def run(self, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
        return subprocess.run([CHROOT, str(self.root), *args], capture_output=True,
                              text=True, timeout=timeout, env=_chroot_env(), check=False)

    def reference(self, version: int, x: np.ndarray) -> np.ndarray:
        sess = ort.InferenceSession(str(self.sources[version]),
                                    providers=["CPUExecutionProvider"])
        return np.asarray(sess.run(None, {"input": x})[0])


def _chroot_env() -> dict[str, str]:
    return {"PATH": f"{VENV}/bin:/usr/bin:/bin", "HOME": "/root", "LANG": "C.UTF-8",
            "GRPC_ENABLE_FORK_SUPPORT": "0"}


@pytest.fixture(scope="module")
def emulated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulated]:
    root = Path(os.environ[ROOT_ENV])
    work = root / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    host = tmp_path_factory.mktemp("arm64")
    private, public = generate_keypair(host / "keys")
    shutil.copy(public, work / "release.pub")
    sources, bundles = {}, {}
    for version, seed in ((1, 11), (2, 22)):
        sources[version] = make_mlp(host / f"mlp-{version}.onnx", seed=seed)
        for path in build_bundles(sources[version], name="mlp", version=version,
                                  profiles=list(PROFILES), out_dir=work / "bundles",
                                  key_path=private, dynamic_batch=True):
            profile = next(p for p in sorted(PROFILES, key=len, reverse=True)
                           if path.name.endswith(f"-{p}.edgepkg"))
            bundles[(version, profile)] = path
    try:
        yield Emulated(root, work, work / "release.pub", sources, bundles)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_python_is_aarch64_under_emulation(emulated: Emulated) -> None:
    proc = emulated.run(f"{VENV}/bin/python", "-c",
                        "import platform, onnxruntime; print(platform.machine(), "
                        "onnxruntime.__version__)")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[0] == "aarch64"


@pytest.mark.parametrize("profile", PROFILES)
def test_parity_on_arm64_kernels_offline(emulated: Emulated, profile: str) -> None:
    bundle = emulated.bundles[(1, profile)]
    proc = emulated.run(f"{VENV}/bin/edge-agent", "check", emulated.inside(bundle), "--trust",
                        emulated.inside(emulated.public_key), "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["passed"] is True, report["message"]
    assert report["batch_sizes"] == [1, 4]
    print(f"{profile}: {report['message']}")


class EmulatedAgent(AgentProcess):
    """``edge-agent serve`` inside the arm64 root file system (chroot), on loopback."""

    def __init__(self, emulated: Emulated) -> None:
        state = emulated.work / "state"
        super().__init__(state, trust=emulated.public_key)
        self.args = [CHROOT, str(emulated.root), f"{VENV}/bin/edge-agent", "serve",
                     "--state-dir", emulated.inside(state), "--grpc", "127.0.0.1:0",
                     "--no-uds", "--management", "127.0.0.1:0", "--name", "arm64-emulated",
                     "--trust", emulated.inside(emulated.public_key), "--insecure",
                     "--no-mdns"]
        self.env = _chroot_env()


def _infer(agent: AgentProcess) -> tuple[str, np.ndarray]:
    import tritonclient.grpc as tc

    with tc.InferenceServerClient(agent.grpc) as triton:
        inp = tc.InferInput("input", list(X.shape), "FP32")
        inp.set_data_from_numpy(X)
        result = triton.infer("mlp", [inp], client_timeout=600)
    return result.get_response().model_version, np.asarray(result.as_numpy("probs"))


def test_the_agent_deploys_checks_parity_serves_swaps_and_rolls_back(emulated: Emulated) -> None:
    profile = PROFILES[0]
    agent = EmulatedAgent(emulated)
    agent.start(timeout=900)
    try:
        info = agent.client(timeout_s=600).info()
        assert info.arch == "aarch64"
        with agent.client(timeout_s=600, deploy_timeout_s=1800) as client:
            first = client.deploy(emulated.bundles[(1, profile)])
            assert first.ok, first.message
            steps = {s.step: s.message for s in first.deployment.steps}
            assert "agrees with the source model" in steps["parity"]
            version, out = _infer(agent)
            assert version == "1"
            np.testing.assert_allclose(out, emulated.reference(1, X), rtol=1e-3, atol=1e-4)

            second = client.deploy(emulated.bundles[(2, profile)])  # hot swap
            assert second.ok, second.message
            version, out = _infer(agent)
            assert version == "2"
            np.testing.assert_allclose(out, emulated.reference(2, X), rtol=1e-3, atol=1e-4)

            back = client.rollback("mlp")
            assert back.ok, back.message
            version, out = _infer(agent)
            assert version == "1"
            np.testing.assert_allclose(out, emulated.reference(1, X), rtol=1e-3, atol=1e-4)
    finally:
        assert agent.stop(timeout=300) == 0
