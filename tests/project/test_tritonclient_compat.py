"""The agent lives beside the Triton client its users already have (issue 23).

One ``edgeship[agent]`` venv from this checkout, then, in it:

1. as installed (the newest protobuf pip picks): the generated stubs import with warnings as
   errors and round-trip a request;
2. ``pip install -U 'tritonclient[all]'``, the newest (it takes protobuf back below 7):
   ``pip check`` passes, ``edge-agent serve`` (a real subprocess on 127.0.0.1, ports from the OS,
   mDNS off) serves an MLP bundle and tritonclient.grpc's answer matches ONNX Runtime's;
3. the oldest tritonclient ``[dev]`` supports with the lowest protobuf ``[agent]`` declares
   (both read from pyproject.toml): the stubs import, serve and infer again.

Slow: one pip install of ``[agent]`` and two of tritonclient (pip's cache). Skipped, with pip's
words, only when pip cannot reach a registry.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from packager.build import build_bundles
from tests.project.venvs import ROOT, Venv, report, venv_with
from tests.support.harness import AgentProcess
from tests.support.model_factory import make_mlp

pytestmark = pytest.mark.slow

STUBS_LOAD = """
import sys
from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb, grpc_service_pb2_grpc
from edge_agent.frontends.grpc.generated import health_pb2, health_pb2_grpc, model_config_pb2
from edge_agent.management.generated import management_pb2, management_pb2_grpc
import edge_agent.server
request = pb.ModelInferRequest(model_name="mlp")
request.inputs.add(name="input", datatype="FP32", shape=[2, 64])
again = pb.ModelInferRequest.FromString(request.SerializeToString())
assert list(again.inputs[0].shape) == [2, 64], again
from google.protobuf import __version__
print(__version__)
"""

INFER = """
import json, sys
import numpy as np
import tritonclient.grpc as tc
client = tc.InferenceServerClient(sys.argv[1])
x = np.asarray(json.loads(sys.argv[2]), dtype=np.float32)
given = tc.InferInput("input", list(x.shape), "FP32")
given.set_data_from_numpy(x)
result = client.infer("mlp", [given], outputs=[tc.InferRequestedOutput("probs")])
print(json.dumps(result.as_numpy("probs").tolist()))
"""


def _lower_bound(requirements: list[str], name: str) -> str:
    """The ``>=`` version of ``name`` (extras allowed) in a list of requirement strings."""
    for req in requirements:
        match = re.fullmatch(rf"{re.escape(name)}(\[[^]]*\])?>=([\w.]+)(,<\w+)?", req)
        if match:
            return match[2]
    raise AssertionError(f"no {name}>=... in {requirements}")


EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
    "optional-dependencies"]
OLDEST_TRITONCLIENT = _lower_bound(EXTRAS["dev"], "tritonclient")
LOWEST_PROTOBUF = _lower_bound(EXTRAS["agent"], "protobuf")


def _stubs_load(venv: Venv) -> str:
    out = venv.run(str(venv.bin / "python"), "-W", "error", "-c", STUBS_LOAD)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _serve_and_infer(venv: Venv, bundle: Path, mlp: Path, state: Path) -> None:
    added = venv.run(str(venv.bin / "edge-agent"), "add-bundle", "--state-dir", str(state),
                     "--allow-unsigned", str(bundle))
    assert added.returncode == 0, added.stderr
    x = np.random.default_rng(7).standard_normal((3, 64)).astype(np.float32)
    want = ort.InferenceSession(str(mlp), providers=["CPUExecutionProvider"]).run(
        None, {"input": x})[0]
    with AgentProcess(state, allow_unsigned=True, command=[str(venv.bin / "edge-agent")],
                      env=venv.env) as agent:
        out = venv.python(INFER, agent.grpc, json.dumps(x.tolist()))
        assert out.returncode == 0, out.stderr + "".join(agent.output)
    got = np.asarray(json.loads(out.stdout), dtype=np.float32)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def mlp_bundle(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("mlp")
    mlp = make_mlp(root / "mlp.onnx", seed=5)
    [bundle] = build_bundles(mlp, name="mlp", version=1, profiles=["x86_64-cpu-onnxruntime"],
                             out_dir=root / "out")
    return mlp, bundle


def test_agent_serves_tritonclient_newest_and_oldest(mlp_bundle: tuple[Path, Path],
                                                     tmp_path: Path,
                                                     pytestconfig: pytest.Config) -> None:
    mlp, bundle = mlp_bundle
    venv = venv_with("agent", tmp_path, pytestconfig)
    newest_protobuf = _stubs_load(venv)
    assert int(newest_protobuf.split(".")[0]) >= 7, newest_protobuf

    venv.pip("install", "--quiet", "--upgrade", "tritonclient[all]")
    venv.pip("check")
    _stubs_load(venv)
    _serve_and_infer(venv, bundle, mlp, tmp_path / "state-newest")
    newest = venv.version("tritonclient")
    report(pytestconfig, f"edgeship[agent] + tritonclient[all] {newest}: protobuf "
                         f"{venv.version('protobuf')}, site-packages "
                         f"{venv.site_packages_mib():.0f} MiB (du)")

    venv.pip("install", "--quiet", f"tritonclient[grpc]=={OLDEST_TRITONCLIENT}",
             f"protobuf=={LOWEST_PROTOBUF}")
    venv.pip("check")
    assert _stubs_load(venv) == LOWEST_PROTOBUF
    _serve_and_infer(venv, bundle, mlp, tmp_path / "state-oldest")
    report(pytestconfig, f"stubs and agent OK on protobuf {newest_protobuf} (newest), "
                         f"{LOWEST_PROTOBUF} (lowest declared) with tritonclient "
                         f"{OLDEST_TRITONCLIENT}, and with tritonclient {newest}")
