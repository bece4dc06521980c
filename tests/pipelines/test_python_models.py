"""Python-function models on a real agent: user code that hangs, crashes or raises is contained
(runtime processes), and code reaches the device only signed by a trusted key."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import grpc
import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from edge_agent.config.models import ModelOverrides
from tests.pipelines.conftest import Built, build, python_spec, running_agent
from tests.pipelines.conftest import infer_xy as infer

GOOD = np.ones((1, 4), np.float32)
BAD = -GOOD


def pids(label: str) -> set[int]:
    """The runtime processes (children of this test process) labelled ``label`` (mlp:1#0)."""
    found = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getpid() and b"edge_agent.backends.runtime_process" in args \
                and label.encode() in args:
            found.add(int(proc.name))
    return found


@pytest.fixture(scope="module")
def agent(built: Built, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    models = {"hang": ModelOverrides(execution_timeout_ms=1500)}
    with running_agent(tmp_path_factory.mktemp("agent"), built.public_key,
                       models=models) as running:
        for name in ("hang", "crash", "fail"):
            result = running.deploy(built.bundles[name])
            assert result.ok, (name, result.message)
        yield running


def test_a_hanging_function_is_killed_and_its_instance_replaced(agent) -> None:
    np.testing.assert_array_equal(infer(agent.tcp, "hang", GOOD), GOOD * 2)
    before = pids("hang:1#0")
    assert len(before) == 1
    with pytest.raises(InferenceServerException) as err:
        infer(agent.tcp, "hang", BAD)
    assert "hang" in str(err.value)
    np.testing.assert_array_equal(infer(agent.tcp, "hang", GOOD), GOOD * 2)
    after = pids("hang:1#0")
    assert len(after) == 1 and after.isdisjoint(before)


def test_a_crashing_function_answers_unavailable_and_the_next_request_is_served(agent) -> None:
    with pytest.raises(InferenceServerException) as err:
        infer(agent.tcp, "crash", BAD)
    assert err.value.status() == str(grpc.StatusCode.UNAVAILABLE)
    assert "exit status 3" in str(err.value)
    np.testing.assert_array_equal(infer(agent.tcp, "crash", GOOD), GOOD * 2)


def test_a_raising_function_names_itself_and_other_models_keep_serving(agent) -> None:
    with pytest.raises(InferenceServerException) as err:
        infer(agent.tcp, "fail", BAD)
    assert "bad:fail raised ValueError: negative input" in str(err.value)
    np.testing.assert_array_equal(infer(agent.tcp, "fail", GOOD), GOOD * 2)
    np.testing.assert_array_equal(infer(agent.uds, "hang", GOOD), GOOD * 2)


def _rewrite(bundle: Path, out: Path, change: dict[str, bytes]) -> Path:
    """A copy of ``bundle`` with the members in ``change`` replaced (manifest untouched)."""
    with tarfile.open(bundle) as src, tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as dst:
        for member in src.getmembers():
            data = src.extractfile(member).read()  # type: ignore[union-attr]
            data = change.get(member.name, data)
            member.size = len(data)
            dst.addfile(member, io.BytesIO(data))
    return out


def test_a_tampered_python_source_is_refused(agent, built: Built, tmp_path: Path) -> None:
    evil = b"import os\ndef hang(inputs, ctx):\n    os.system('true')\n    return inputs\n"
    tampered = _rewrite(built.bundles["hang"], tmp_path / "hang-1.edgepkg",
                        {"code/bad.py": evil})
    with agent.client() as c:
        before = [(v.model, v.version, v.active) for v in c.models()]
        result = c.deploy(tampered, force=True)
        assert not result.ok
        assert "code/bad.py" in result.message
        assert [(v.model, v.version, v.active) for v in c.models()] == before


def test_unsigned_code_is_refused_even_with_allow_unsigned(built: Built, tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text("def fail(inputs, ctx):\n    return inputs\n")
    unsigned = build(python_spec(tmp_path, "fail", "bad:fail"), 1, tmp_path / "out", None)
    with running_agent(tmp_path / "agent", None, allow_unsigned=True) as agent:
        result = agent.deploy(unsigned)
        assert not result.ok
        assert "Python code" in result.message and "whatever --allow-unsigned" in result.message
        assert not (tmp_path / "agent" / "models" / "fail").exists()


def test_missing_requirement_and_missing_function_refuse_the_deploy(
        agent, built: Built, tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text("def fail(inputs, ctx):\n    return {'Y': inputs['X']}\n")
    needs = build(python_spec(tmp_path, "fail", "bad:fail",
                              'requires = ["surely-not-installed-dist"]'), 2, tmp_path / "a",
                  built.private_key)
    nofn = build(python_spec(tmp_path, "fail", "bad:nope"), 3, tmp_path / "b",
                 built.private_key)
    with agent.client() as c:
        result = c.deploy(needs)
        assert not result.ok and "surely-not-installed-dist" in result.message
        assert "pip install" in result.message
        result = c.deploy(nofn)
        assert not result.ok and "no function 'nope'" in result.message
        active = {v.model: v.version for v in c.models() if v.active}
    assert active["fail"] == 1
    np.testing.assert_array_equal(infer(agent.tcp, "fail", GOOD), GOOD * 2)


def test_a_python_model_rolls_back_like_any_model(agent, built: Built, tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text(
        "def crash(inputs, ctx):\n    return {'Y': inputs['X'] * 3}\n")
    v2 = build(python_spec(tmp_path, "crash", "bad:crash"), 2, tmp_path / "out",
               built.private_key)
    with agent.client() as c:
        assert c.deploy(v2).ok
        np.testing.assert_array_equal(infer(agent.tcp, "crash", GOOD), GOOD * 3)
        assert c.rollback("crash").ok
    np.testing.assert_array_equal(infer(agent.tcp, "crash", GOOD), GOOD * 2)
