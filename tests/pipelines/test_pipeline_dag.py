"""Pipelines that branch: the steps form a DAG whose ready steps run at the same time, a cycle
is refused at build naming its steps, and a step with a condition (``when``) runs only when it
holds (its outputs absent otherwise). Real builds (``edge-pack build``), a real agent."""

from __future__ import annotations

import itertools
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from packager.cli import main
from tests.pipelines.branching import bundles, tensors
from tests.pipelines.conftest import PROFILE, Agent, Built, build, running_agent

MEMBERS = {"meet_a": ("meet_a", ("X",), ""), "meet_b": ("meet_b", ("X",), ""),
           "add": ("add", ("A", "B"), ""), "double": ("double", ("X",), "")}

# the merge step comes first and the branches after it: the order is the graph's, not the list's
DIAMOND = 'name = "diamond"\nkind = "pipeline"\nmax_batch_size = 0\n' + tensors(
    ("X",), ("Y", "Z", "W")) + '''
[[steps]]
model = "add"
inputs = { A = "left", B = "right" }
outputs = { Y = "Y" }

[[steps]]
model = "meet_a"
inputs = { X = "X" }
outputs = { Y = "left" }

[[steps]]
model = "meet_b"
inputs = { X = "X" }
outputs = { Y = "right" }

[[steps]]
model = "double"
inputs = { X = "Y" }
outputs = { Y = "Z" }
when = { tensor = "X", op = ">", value = 0 }

[[steps]]
model = "double"
inputs = { X = "Z" }
outputs = { Y = "W" }
'''

RUNS = itertools.count(1)


def _build(capsys: pytest.CaptureFixture[str], spec: Path, out: Path) -> tuple[int, str]:
    code = main(["build", str(spec), "--version", "1", "--profile", PROFILE, "--out",
                 str(out), "--quiet"])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(("old", "new", "needle"), [
    # a cycle: meet_a reads what add writes, add reads what meet_a writes
    ('inputs = { X = "X" }\noutputs = { Y = "left" }', 'inputs = { X = "Y" }\n'
     'outputs = { Y = "left" }', "the steps form a cycle: steps[0] (add) -> steps[1] (meet_a) "
     "-> steps[0] (add)"),
    ('when = { tensor = "X", op = ">", value = 0 }',
     'when = { tensor = "X", op = "~", value = 0 }', "steps[3].when.op = '~' is not one of"),
    ('when = { tensor = "X", op = ">", value = 0 }',
     'when = { tensor = "X", op = ">", value = "0" }', "steps[3].when.value = '0' must be a"),
    ('when = { tensor = "X", op = ">", value = 0 }',
     'when = { tensor = "V", op = ">", value = 0 }', "steps[3] (double) reads ['V']"),
    ('when = { tensor = "X", op = ">", value = 0 }', 'when = "X > 0"',
     "steps[3].when must be a table with exactly tensor, op and value"),
    ("max_batch_size = 0", "max_batch_size = 4",
     "steps[3].when: a condition decides for a whole execution"),
])
def test_a_bad_graph_is_refused_at_build(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         old: str, new: str, needle: str) -> None:
    assert old in DIAMOND
    spec = tmp_path / "diamond.toml"
    spec.write_text(DIAMOND.replace(old, new, 1))
    code, err = _build(capsys, spec, tmp_path / "dist")
    assert code == 1 and needle in err and err.count("\n") == 1, err
    assert not (tmp_path / "dist").exists() or not list((tmp_path / "dist").iterdir())


def test_steps_in_any_order_build_with_their_condition(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    spec = tmp_path / "diamond.toml"
    spec.write_text(DIAMOND)
    code, err = _build(capsys, spec, tmp_path / "dist")
    assert code == 0, err
    (bundle,) = (tmp_path / "dist").iterdir()
    with tarfile.open(bundle) as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
    steps = manifest["backend_options"]["pipeline"]["steps"]
    assert [s["model"] for s in steps] == ["add", "meet_a", "meet_b", "double", "double"]
    assert steps[3]["when"] == {"tensor": "X", "op": ">", "value": 0}
    assert all("when" not in s for i, s in enumerate(steps) if i != 3)  # stored as before


@pytest.fixture(scope="module")
def agent(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    src = tmp_path_factory.mktemp("dag")
    made = bundles(src, built, tmp_path_factory.mktemp("meet"), MEMBERS)
    (src / "diamond.toml").write_text(DIAMOND)
    made.append(build(src / "diamond.toml", 1, src / "out", None))
    with running_agent(tmp_path_factory.mktemp("agent"), built.public_key,
                       allow_unsigned=True, max_concurrent_executions=4) as running:
        for bundle in made:
            result = running.deploy(bundle)
            assert result.ok, result.message
        yield running


def _diamond(url: str, x: np.ndarray) -> tuple[np.ndarray | None, ...]:
    with grpcclient.InferenceServerClient(url) as client:
        inp = grpcclient.InferInput("X", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        result = client.infer("diamond", [inp], client_timeout=120)
        return result.as_numpy("Y"), result.as_numpy("Z"), result.as_numpy("W")


def _executions(url: str, model: str) -> int:
    with grpcclient.InferenceServerClient(url) as client:
        (s,) = client.get_inference_statistics(model, as_json=True)["model_stats"]
    return int(s.get("execution_count", 0))


def test_the_branches_run_at_the_same_time_and_the_condition_gates_its_step(
        agent: Agent) -> None:
    # meet_a (2x) and meet_b (3x) each answer only once the other has started: in sequence
    # the first would wait for the second, which never starts
    x = np.array([1.0, next(RUNS), 2.0, 3.0], np.float32)
    y, z, w = _diamond(agent.tcp, x)
    assert y is not None and z is not None and w is not None
    np.testing.assert_allclose(y, 5 * x)
    np.testing.assert_allclose(z, 10 * x)  # every X > 0: the optional step ran
    np.testing.assert_allclose(w, 20 * x)  # and the step that reads its output

    doubled = _executions(agent.tcp, "double")
    x = np.array([1.0, next(RUNS), -2.0, 3.0], np.float32)
    y, z, w = _diamond(agent.uds, x)
    assert y is not None
    np.testing.assert_allclose(y, 5 * x)
    # the condition failed: the step was skipped and its output is absent, and so was the
    # step that reads that output
    assert z is None and w is None
    assert _executions(agent.tcp, "double") == doubled



def test_naming_a_skipped_output_is_refused_clearly(agent: Agent) -> None:
    x = np.array([1.0, next(RUNS), -2.0, 3.0], np.float32)
    with grpcclient.InferenceServerClient(agent.tcp) as client:
        inp = grpcclient.InferInput("X", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        with pytest.raises(InferenceServerException) as err:
            client.infer("diamond", [inp], outputs=[grpcclient.InferRequestedOutput("Z")],
                         client_timeout=120)
        assert "output 'Z' was not produced for this request: step 4 (model 'double') was " \
               "skipped" in str(err.value)
        assert err.value.status() == "StatusCode.INVALID_ARGUMENT"
        y = client.infer("diamond", [inp], outputs=[grpcclient.InferRequestedOutput("Y")],
                         client_timeout=120)
        np.testing.assert_allclose(y.as_numpy("Y"), 5 * x)
        assert y.as_numpy("Z") is None
