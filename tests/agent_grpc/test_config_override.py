"""Model control load with Triton's ``config`` override, through the unmodified tritonclient
(gRPC and HTTP) against a real agent: the fields the agent can honour become live settings
(max_batch_size above the bundle's, since the batch dimension is dynamic; dynamic batching's
preferred sizes and delay; the instance count), every other field is refused by name, and the
failures Triton's examples check keep Triton's words ("failed to load '...'", "failed to poll
from model repository")."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from packager.build import build_bundles
from packager.triton_samples import SIMPLE_WIDTH, make_add_sub
from tests.support.harness import InProcessAgent, sections, serving_bundles

PROFILE = "x86_64-cpu-onnxruntime"
MALFORMED = '"parameters": {"config": {{"max_batch_size": "16"}}}'  # what Triton's examples send


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessAgent]:
    """A real agent with model control on, serving Triton's ``simple`` (max batch 8) and
    ``simple_http`` (the same, for the HTTP client), over gRPC and HTTP on 127.0.0.1."""
    root = tmp_path_factory.mktemp("config-override")
    source = make_add_sub(root / "simple.onnx")
    bundles = [build_bundles(source, name=name, version=1, profiles=[PROFILE],
                             out_dir=root / "out", max_batch=8)[0]
               for name in ("simple", "simple_http")]
    with serving_bundles(root, bundles, "[grpc]\nrepository_control = true\n",
                         options=sections("config-override", insecure=True),
                         name="config-override-agent") as served:
        yield served


def _rows(n: int, module: object) -> list[object]:
    x = np.arange(n * SIMPLE_WIDTH, dtype=np.int32).reshape(n, SIMPLE_WIDTH)
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        inp = module.InferInput(name, [n, SIMPLE_WIDTH], "INT32")  # type: ignore[attr-defined]
        inp.set_data_from_numpy(x)
        inputs.append(inp)
    return inputs


def test_grpc_config_override_applies_live_settings(agent: InProcessAgent) -> None:
    with grpcclient.InferenceServerClient(agent.grpc) as triton:
        assert triton.get_model_config("simple").config.max_batch_size == 8
        with pytest.raises(InferenceServerException) as err:
            triton.infer("simple", _rows(16, grpcclient))
        assert err.value.status() == "StatusCode.INVALID_ARGUMENT"
        triton.load_model("simple", config=(
            '{"max_batch_size": "16", "dynamic_batching": {"preferredBatchSize": [4, 16], '
            '"max_queue_delay_microseconds": "300"}, "instance_group": [{"count": 2, '
            '"kind": "KIND_AUTO"}], "name": "simple"}'))
        config = triton.get_model_config("simple").config
        assert config.max_batch_size == 16
        assert list(config.dynamic_batching.preferred_batch_size) == [4, 16]
        assert config.dynamic_batching.max_queue_delay_microseconds == 300
        assert [g.count for g in config.instance_group] == [2]
        out = triton.infer("simple", _rows(16, grpcclient)).as_numpy("OUTPUT0")
        assert out is not None and out.shape == (16, SIMPLE_WIDTH)
        assert out[15, 0] == 2 * 15 * SIMPLE_WIDTH
        # the override is a live setting: an unload and a plain load keep it
        triton.unload_model("simple")
        assert not triton.is_model_ready("simple")
        triton.load_model("simple")
        assert triton.get_model_config("simple").config.max_batch_size == 16
    with agent.client() as client:
        settings = {s.key: s for s in client.model_settings("simple")}
    assert (settings["max_batch_size"].value, settings["max_batch_size"].source) == ("16", "live")
    assert settings["instances"].value == "2"


def test_http_config_override_applies_live_settings(agent: InProcessAgent) -> None:
    assert agent.addresses is not None and agent.addresses.http
    triton = httpclient.InferenceServerClient(agent.addresses.http)
    try:
        triton.load_model("simple_http", config='{"maxBatchSize": 12}')
        config = triton.get_model_config("simple_http")
        assert config["max_batch_size"] == 12
        out = triton.infer("simple_http", _rows(12, httpclient)).as_numpy("OUTPUT1")
        assert out is not None and out.shape == (12, SIMPLE_WIDTH) and not out.any()
        with pytest.raises(InferenceServerException) as err:
            triton.infer("simple_http", _rows(13, httpclient))
        assert err.value.status() == "400"
    finally:
        triton.close()


def _refusals(load: object, status: dict[str, str]) -> None:
    """Every refusal a load with a config or files gets, with ``load(name, **kw)`` and the
    protocol's ``status`` names."""
    cases: list[tuple[str, dict[str, object], str, tuple[str, ...]]] = [
        ("simple", {"config": MALFORMED}, "invalid", ("failed to load 'simple'", "not valid JSON")),
        ("simple", {"config": "[16]"}, "invalid", ("failed to load 'simple'", "JSON object")),
        ("simple", {"config": '{"backend": "python", "input": [], "dynamic_batching": '
                              '{"priority_levels": 2}, "instance_group": [{"count": 1, '
                              '"kind": "KIND_GPU"}]}'},
         "invalid", ("'backend'", "'input'", "'dynamic_batching.priority_levels'",
                     "'instance_group[0].kind'", "edge-pack")),
        ("simple", {"config": '{"name": "other"}'}, "invalid", ("'name'",)),
        ("simple", {"config": '{"max_batch_size": 0}'}, "invalid", ("at least 1",)),
        ("simple", {"config": '{"max_batch_size": "lots"}'}, "invalid", ("'max_batch_size'",)),
        ("simple", {"config": '{"instance_group": [{"count": 65}]}'}, "invalid",
         ("'instance_group[0].count' = 65", "from 1 to 64")),
        ("simple", {"config": '{"instance_group": [{"count": 1}, {"count": 1}]}'}, "invalid",
         ("exactly one group",)),
        ("absent", {"config": '{"max_batch_size": 4}'}, "not_found",
         ("failed to load 'absent'", "not on this device")),
        ("absent", {}, "not_found", ("failed to load 'absent'",)),
        ("simple", {"config": "{}", "files": {"file:1/model.onnx": b"\0"}}, "invalid",
         ("'file:1/model.onnx'", "signed bundles")),
        ("simple", {"config": "{}", "files": {"file:" + "A" * 256: b"a"}}, "internal",
         ("failed to poll from model repository", "signed bundles")),
    ]
    for name, kwargs, want, words in cases:
        with pytest.raises(InferenceServerException) as err:
            load(name, **kwargs)  # type: ignore[operator]
        assert err.value.status() == status[want], (kwargs, err.value)
        for word in words:
            assert word in err.value.message(), (kwargs, err.value.message())


def test_grpc_refusals_name_the_field_and_keep_tritons_words(agent: InProcessAgent) -> None:
    with grpcclient.InferenceServerClient(agent.grpc) as triton:
        before = triton.get_model_config("simple").config
        _refusals(triton.load_model, {"invalid": "StatusCode.INVALID_ARGUMENT",
                                      "not_found": "StatusCode.NOT_FOUND",
                                      "internal": "StatusCode.INTERNAL"})
        assert triton.get_model_config("simple").config == before
        assert triton.is_server_live() and triton.is_model_ready("simple")


def test_http_refusals_name_the_field_and_keep_tritons_words(agent: InProcessAgent) -> None:
    assert agent.addresses is not None and agent.addresses.http
    triton = httpclient.InferenceServerClient(agent.addresses.http)
    try:
        before = triton.get_model_config("simple")
        _refusals(triton.load_model, {"invalid": "400", "not_found": "404",
                                      "internal": "500"})
        assert triton.get_model_config("simple") == before
        assert triton.is_model_ready("simple")
    finally:
        triton.close()

