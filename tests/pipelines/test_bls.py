"""Business Logic Scripting: a Python model calls another model through ``ctx.infer``, only
under a condition, from its runtime process (the default) and from the agent's process."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from edge_agent.config.models import ModelOverrides
from tests.pipelines.conftest import Built, build, running_agent

GATE = '''
import numpy as np


def gate(inputs, ctx):
    """Rows whose first feature is positive go through the MLP; the others answer zeros."""
    x = inputs["input"]
    out = np.zeros((len(x), 10), np.float32)
    chosen = x[:, 0] > 0
    if chosen.any():
        out[chosen] = ctx.infer("mlp", {"input": x[chosen]})["probs"]
    return {"probs": out}


def keep(inputs, ctx):
    """Reads its inputs after a ctx.infer: they must still be the request's."""
    x = inputs["input"]
    ctx.infer("mlp", {"input": x})
    return {"probs": x[:, :10] * 1.0}


def broken(inputs, ctx):
    return ctx.infer("no_such_model", {"input": inputs["input"]})
'''

SPEC = '''
name = "{name}"
kind = "python"
source = ["gate.py"]
entry = "gate:{fn}"
max_batch_size = 8
[[inputs]]
name = "input"
datatype = "FP32"
shape = [64]
[[outputs]]
name = "probs"
datatype = "FP32"
shape = [10]
'''


def _bundle(tmp: Path, built: Built, name: str, fn: str) -> Path:
    (tmp / "gate.py").write_text(GATE)
    (tmp / f"{name}.toml").write_text(SPEC.format(name=name, fn=fn))
    return build(tmp / f"{name}.toml", 1, tmp / "out", built.private_key)


def _mlp_count(url: str) -> int:
    with grpcclient.InferenceServerClient(url) as client:
        stats = client.get_inference_statistics("mlp", as_json=True)["model_stats"]
        return sum(int(s.get("inference_count", 0)) for s in stats)


def _call(url: str, model: str, x: np.ndarray) -> np.ndarray:
    with grpcclient.InferenceServerClient(url) as client:
        inp = grpcclient.InferInput("input", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        return client.infer(model, [inp]).as_numpy("probs")


def test_a_python_model_calls_a_model_only_under_a_condition(built: Built,
                                                              tmp_path: Path) -> None:
    ref = ort.InferenceSession(str(built.mlp_source), providers=["CPUExecutionProvider"])
    models = {"gate_inproc": ModelOverrides(isolation="thread")}
    with running_agent(tmp_path / "agent", built.public_key, models=models) as agent:
        assert agent.deploy(built.bundles["mlp"]).ok
        for name in ("gate", "gate_inproc", "broken"):
            fn = "broken" if name == "broken" else "gate"
            result = agent.deploy(_bundle(tmp_path, built, name, fn))
            assert result.ok, result.message
        rng = np.random.default_rng(1)
        for model in ("gate", "gate_inproc"):
            x = rng.standard_normal((4, 64)).astype(np.float32)
            x[:, 0] = [1.0, -1.0, 2.0, -2.0]
            before = _mlp_count(agent.tcp)
            got = _call(agent.tcp, model, x)
            want = ref.run(None, {"input": x[[0, 2]]})[0]
            np.testing.assert_allclose(got[[0, 2]], want, rtol=1e-5, atol=1e-6)
            assert not got[[1, 3]].any()
            assert _mlp_count(agent.tcp) == before + 2  # only the chosen rows reached the MLP
            x[:, 0] = -1.0
            assert not _call(agent.uds, model, x).any()
            assert _mlp_count(agent.tcp) == before + 2
        with pytest.raises(InferenceServerException) as err:
            _call(agent.tcp, "broken", np.ones((1, 64), np.float32))
        assert "ctx.infer('no_such_model') failed" in str(err.value)
        np.testing.assert_allclose(_call(agent.tcp, "gate", np.ones((1, 64), np.float32)),
                                   ref.run(None, {"input": np.ones((1, 64), np.float32)})[0],
                                   rtol=1e-5, atol=1e-6)


def test_inputs_stay_intact_after_a_ctx_infer_from_a_runtime_process(built: Built,
                                                                     tmp_path: Path) -> None:
    with running_agent(tmp_path / "agent", built.public_key) as agent:
        assert agent.deploy(built.bundles["mlp"]).ok
        result = agent.deploy(_bundle(tmp_path, built, "keep", "keep"))
        assert result.ok, result.message
        x = np.random.default_rng(2).standard_normal((3, 64)).astype(np.float32)
        np.testing.assert_array_equal(_call(agent.uds, "keep", x), x[:, :10])
