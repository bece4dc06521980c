"""edge_agent.embedded: a bundle or an agent's state directory served in the test's process
(real ONNX Runtime, real signatures, a real agent for the state directory)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from edge_agent import embedded
from edge_agent.errors import InvalidInputError, ModelNotFoundError
from packager.bundle.reader import open_bundle as read_bundle
from tests.support.bundles import Bundles
from tests.support.eventually import eventually
from tests.support.harness import trusted_agent

ROOT = Path(__file__).resolve().parents[2]


def rows(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 64)).astype(np.float32)


def test_a_fresh_interpreter_opens_and_infers_without_importing_grpc(bundles: Bundles) -> None:
    script = (
        "import sys, numpy as np\n"
        "from edge_agent import embedded\n"
        "assert 'grpc' not in sys.modules, 'import'\n"
        "with embedded.open_bundle(sys.argv[1], trusted_keys=[sys.argv[2]]) as rt:\n"
        "    out = rt.infer('mlp', {'input': np.zeros((2, 64), np.float32)})\n"
        "    assert out['probs'].shape == (2, 10)\n"
        "assert 'grpc' not in sys.modules, 'infer'\n"
        "print('ok')\n")
    done = subprocess.run([sys.executable, "-c", script, str(bundles.mlp[1]),
                           str(bundles.public_key)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_a_signed_bundle_serves_concurrent_threads_through_one_batcher(
        bundles: Bundles) -> None:
    with embedded.open_bundle(bundles.mlp[2], trusted_keys=[bundles.public_key]) as rt:
        assert rt.models() == ["mlp"]
        meta = rt.metadata("mlp")
        assert meta.versions == (2,) and meta.inputs[0].name == "input"
        errors: list[BaseException] = []

        def caller(seed: int) -> None:
            try:
                for i in range(20):
                    x = rows(1 + (seed + i) % 3, seed * 100 + i)
                    result = rt.infer_result("mlp", {"input": x})
                    assert result.version == 2
                    np.testing.assert_allclose(result.outputs["probs"],
                                               bundles.reference(2, x), rtol=1e-4, atol=1e-5)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=caller, args=(s,)) for s in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors[0]
        (stats,) = rt.statistics("mlp")
        assert stats.success.count == 160 and stats.fail.count == 0
        future = rt.submit("mlp", {"input": rows(1, 7)})
        np.testing.assert_allclose(future.result(60).outputs["probs"],
                                   bundles.reference(2, rows(1, 7)), rtol=1e-4, atol=1e-5)


def test_wrong_inputs_and_unknown_models_raise_the_agents_errors(bundles: Bundles,
                                                                 tmp_path: Path) -> None:
    with read_bundle(bundles.mlp[1]) as reader:  # an extracted bundle directory works too
        extracted = reader.extract(tmp_path / "mlp-1")
    with embedded.open_bundle(extracted, trusted_keys=[bundles.public_key]) as rt:
        with pytest.raises(InvalidInputError, match=r"'input' has shape \[1, 63\]"):
            rt.infer("mlp", {"input": np.zeros((1, 63), np.float32)})
        with pytest.raises(InvalidInputError, match="datatype float64"):
            rt.infer("mlp", {"input": np.zeros((1, 64))})
        with pytest.raises(ModelNotFoundError, match="'resnet' is not in the repository"):
            rt.infer("resnet", {"input": rows(1, 0)})
        assert rt.infer("mlp", {"input": rows(1, 0)})["probs"].shape == (1, 10)
    with pytest.raises(embedded.EmbeddedOpenError, match="closed"):
        rt.infer("mlp", {"input": rows(1, 0)})


def test_signatures_are_checked_like_a_deploy(bundles: Bundles, tmp_path: Path) -> None:
    with pytest.raises(embedded.EmbeddedOpenError, match=r"refused: .*unsigned"):
        embedded.open_bundle(bundles.unsigned, trusted_keys=[bundles.public_key])
    with pytest.raises(embedded.EmbeddedOpenError, match="no trusted public key"):
        embedded.open_bundle(bundles.mlp[1])
    tampered = tmp_path / "tampered"
    with read_bundle(bundles.mlp[1]) as reader:
        reader.extract(tampered)
    manifest = tampered / "manifest.json"
    manifest.write_bytes(manifest.read_bytes().replace(b'"mlp"', b'"mlq"', 1))
    with pytest.raises(embedded.EmbeddedOpenError, match="refused"):
        embedded.open_bundle(tampered, trusted_keys=[bundles.public_key])
    with pytest.raises(embedded.EmbeddedOpenError, match="no such bundle file"):
        embedded.open_bundle(tmp_path / "missing.edgepkg")
    # pure data, explicitly allowed: served
    with embedded.open_bundle(bundles.unsigned, allow_unsigned=True) as rt:
        x = rows(2, 3)
        np.testing.assert_allclose(rt.infer("mlp", {"input": x})["probs"],
                                   bundles.reference(1, x), rtol=1e-4, atol=1e-5)


AGENT_WRITES = {"residency.json"}  # the running agent rewrites it at each load and unload


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_mtime_ns, p.stat().st_size)
            for p in root.rglob("*") if p.is_file() and p.name not in AGENT_WRITES}


def test_an_agents_state_dir_serves_its_active_versions_read_only(bundles: Bundles,
                                                                 tmp_path: Path) -> None:
    state = tmp_path / "state"
    with trusted_agent(state, bundles.public_key, deploy=bundles.mlp[1]) as agent:
        with agent.client() as client:
            assert client.deploy(bundles.mlp[3]).ok
            assert client.activate("mlp", 1).ok  # the active version is 1, not the highest
        # the agent is running: no lock is taken, nothing is written
        with embedded.open_state_dir(state, trusted_keys=[bundles.public_key]) as rt:
            x = rows(3, 9)
            result = rt.infer_result("mlp", {"input": x})
            assert result.version == 1
            np.testing.assert_allclose(result.outputs["probs"], bundles.reference(1, x),
                                       rtol=1e-4, atol=1e-5)
    before = _tree(state)
    config = tmp_path / "agent.toml"
    config.write_text(f'[management]\ntrust = ["{bundles.public_key}"]\n'
                      "[models.mlp]\npriority = 2\n")
    with embedded.open_state_dir(state, config=config) as rt:
        assert rt.models() == ["mlp"]
        assert rt.infer("mlp", {"input": rows(1, 1)})["probs"].shape == (1, 10)
    assert _tree(state) == before
    with pytest.raises(embedded.EmbeddedOpenError, match="no trusted public key"):
        embedded.open_state_dir(state)
    with pytest.raises(embedded.EmbeddedOpenError, match="no state database"):
        embedded.open_state_dir(tmp_path / "empty")


def test_the_example_app_infers_from_a_bundle_in_its_own_process(bundles: Bundles) -> None:
    done = subprocess.run([sys.executable, "examples/embedded_app.py", "--bundle",
                           str(bundles.mlp[1]), "--trust", str(bundles.public_key)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("mlp probs [1, 10]") == 4
    assert "a wrong input is refused: InvalidInputError" in done.stdout
    refused = subprocess.run([sys.executable, "examples/embedded_app.py", "--bundle",
                              str(bundles.unsigned)], capture_output=True, text=True,
                             timeout=300, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert refused.returncode == 1 and "unsigned" in refused.stderr


def test_a_code_bundle_needs_a_trusted_signature_whatever_allow_unsigned_says(
        bundles: Bundles, tmp_path: Path) -> None:
    from packager.build import build_bundles
    from tests.pipelines.conftest import PROFILE, python_spec

    (tmp_path / "double.py").write_text("def run(inputs, ctx):\n"
                                        "    return {'Y': inputs['X'] * 2}\n")
    spec = python_spec(tmp_path, "double", "double:run", source="double.py")
    (unsigned,) = build_bundles(spec, name="", version=1, profiles=[PROFILE],
                                out_dir=tmp_path / "unsigned", key_path=None)
    with pytest.raises(embedded.EmbeddedOpenError, match="carries Python code"):
        embedded.open_bundle(unsigned, allow_unsigned=True)
    (signed,) = build_bundles(spec, name="", version=1, profiles=[PROFILE],
                              out_dir=tmp_path / "signed", key_path=bundles.private_key)
    with embedded.open_bundle(signed, trusted_keys=[bundles.public_key]) as rt:
        x = np.arange(8, dtype=np.float32).reshape(2, 4)
        np.testing.assert_array_equal(rt.infer("double", {"X": x})["Y"], x * 2)


def test_threads_calling_infer_at_once_share_executions(bundles: Bundles) -> None:
    with embedded.open_bundle(bundles.mlp[1], trusted_keys=[bundles.public_key]) as rt:
        plane = rt._plane  # the test holds every execution slot while the callers arrive
        batcher = plane.repository.resolve("mlp").batcher
        assert batcher is not None
        for _ in range(plane.gate.limit):
            plane.gate.acquire(1)
        xs = [rows(1, seed) for seed in range(8)]
        answers: dict[int, np.ndarray] = {}
        threads = [threading.Thread(target=lambda i=i: answers.__setitem__(
            i, rt.infer("mlp", {"input": xs[i]})["probs"])) for i in range(8)]
        for t in threads:
            t.start()
        eventually(lambda: batcher.inflight >= 8, timeout=60, interval=0.005,
                   message="the callers did not all arrive")
        for _ in range(plane.gate.limit):
            plane.gate.release()
        for t in threads:
            t.join(60)
        for i, x in enumerate(xs):
            np.testing.assert_allclose(answers[i], bundles.reference(1, x), rtol=1e-4,
                                       atol=1e-5)
        (stats,) = rt.statistics("mlp")
        assert stats.inference_count == 8 and stats.execution_count < 8  # batched together
