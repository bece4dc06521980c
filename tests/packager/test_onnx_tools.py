"""ONNX helpers on the real light CNNs: IO signature and making the batch dim dynamic."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from packager.bundle.errors import ModelError
from packager.onnx_tools import io_signature, load_model, make_batch_dynamic, real_inputs
from tests.support.model_factory import light_model_path, make_mlp


@pytest.mark.parametrize("name", ["squeezenet", "inception_v1", "resnet50"])
def test_initializers_listed_as_inputs_are_not_model_inputs(name):
    model = load_model(light_model_path(name))
    assert len(model.graph.input) > 1  # old export: initializers among inputs
    inputs, outputs = io_signature(model)
    assert len(inputs) == 1 and inputs[0].shape == (1, 3, 224, 224)
    assert inputs[0].datatype == "FP32" and len(outputs) == 1
    assert [vi.name for vi in real_inputs(model)] == [inputs[0].name]


@pytest.mark.parametrize("name", ["squeezenet", "shufflenet", "inception_v1"])
def test_make_batch_dynamic_runs_at_several_batch_sizes(name):
    src = onnx.load(str(light_model_path(name)))
    dyn = make_batch_dynamic(src)
    inputs, outputs = io_signature(dyn)
    assert inputs[0].shape[0] == -1 and outputs[0].shape[0] == -1
    # the original model is untouched
    assert io_signature(src)[0][0].shape[0] == 1
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(dyn.SerializeToString(), so, providers=["CPUExecutionProvider"])
    ref = ort.InferenceSession(src.SerializeToString(), so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 3, 224, 224)).astype(np.float32)
    (y,) = sess.run(None, {inputs[0].name: x})
    assert y.shape[0] == 3
    # row i of the batched run equals the batch-1 run of the original model
    (y1,) = ref.run(None, {inputs[0].name: x[1:2]})
    np.testing.assert_allclose(y[1:2], y1, rtol=1e-5, atol=1e-6)


def test_make_batch_dynamic_refuses_a_leading_dim_other_than_one(tmp_path):
    model = onnx.load(make_mlp(tmp_path / "m.onnx", dynamic_batch=False))
    for vi in model.graph.input:
        vi.type.tensor_type.shape.dim[0].dim_value = 4
    with pytest.raises(ModelError, match="'input' has a fixed leading dim of 4"):
        make_batch_dynamic(model)


def test_fixed_batch_model_without_dynamic_flag_is_unbatched(tmp_path, pk_dir):
    from packager.build import build_bundles
    from packager.bundle.reader import open_bundle

    fixed = make_mlp(tmp_path / "fixed.onnx", dynamic_batch=False)
    (path,) = build_bundles(fixed, name="fixed", version=1, out_dir=tmp_path / "o",
                            profiles=["x86_64-cpu-onnxruntime"])
    with open_bundle(path) as r:
        m = r.manifest
    assert m.batching.max_batch_size == 0 and not m.batched
    assert m.inputs[0].shape == (1, 64)
    assert m.parity["artifacts"]["onnxruntime"]["batch_sizes"] == [1]
