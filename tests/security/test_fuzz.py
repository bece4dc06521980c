"""Property-based fuzzing (hypothesis) of ModelInfer and of the management API on a real agent:
malformed, oversized-by-declaration and inconsistent messages never crash it, always get a
proper status code (never UNKNOWN or INTERNAL) with a message, and a well-behaved caller running
alongside sees no failure."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from edge_agent.client.agent_client import AgentClient
from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb
from edge_agent.frontends.grpc.generated import grpc_service_pb2_grpc as pb_grpc
from edge_agent.management.auth import bearer
from edge_agent.management.generated import management_pb2 as mpb
from edge_agent.management.generated import management_pb2_grpc as mpb_grpc
from tests.support.bundles import Bundles
from tests.support.harness import InProcessAgent, trusted_agent
from tests.support.traffic import Bystander

settings.register_profile("edge-fuzz", max_examples=150, deadline=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                 HealthCheck.too_slow,
                                                 HealthCheck.data_too_large])
FUZZ = settings.get_profile("edge-fuzz")
FORBIDDEN = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL, grpc.StatusCode.UNIMPLEMENTED,
             grpc.StatusCode.DATA_LOSS}
DTYPES = ["BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
          "FP16", "FP32", "FP64", "BYTES", "BF16", "", "FP33", "fp32"]
X = np.random.default_rng(1).standard_normal((1, 64)).astype(np.float32)


@pytest.fixture(scope="module")
def agent(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessAgent]:
    with trusted_agent(tmp_path_factory.mktemp("fuzz") / "state", bundles.public_key,
                       name="fuzz", deploy=bundles.mlp[1]) as running:
        yield running


# -- ModelInfer --------------------------------------------------------------------------------
dims = st.one_of(st.integers(-3, 70), st.sampled_from([0, 1, 2, 64, 2**31, 2**40, 2**62,
                                                       2**63 - 1, -(2**63)]))
shapes = st.one_of(st.just([1, 64]), st.just([2, 64]), st.lists(dims, max_size=5))
names = st.one_of(st.sampled_from(["input", "", "probs", "x"]), st.text(max_size=20))
params = st.dictionaries(
    st.sampled_from(["timeout", "priority", "binary_data_size", "sequence_id", "classification",
                     "binary_data", "x"]),
    st.one_of(st.integers(-(2**63), 2**63 - 1).map(lambda v: pb.InferParameter(int64_param=v)),
              st.booleans().map(lambda v: pb.InferParameter(bool_param=v)),
              st.text(max_size=10).map(lambda v: pb.InferParameter(string_param=v))),
    max_size=3)


@st.composite
def infer_requests(draw: st.DrawFn) -> pb.ModelInferRequest:
    req = pb.ModelInferRequest(
        model_name=draw(st.sampled_from(["mlp", "mlp", "mlp", "", "nope"]) | st.text(max_size=8)),
        model_version=draw(st.sampled_from(["", "", "1", "2", "0", "-1", "x", "9" * 30])),
        id=draw(st.text(max_size=8)))
    for key, value in draw(params).items():
        req.parameters[key].CopyFrom(value)
    use_raw = draw(st.booleans())
    for _ in range(draw(st.integers(0, 3))):
        shape = draw(shapes)
        t = req.inputs.add(name=draw(names), datatype=draw(st.sampled_from(DTYPES)),
                           shape=shape)
        for key, value in draw(params).items():
            t.parameters[key].CopyFrom(value)
        n = min(int(np.prod([d for d in shape if 0 < d < 4096] or [0], dtype=float)), 4096)
        if use_raw:
            size = draw(st.sampled_from([n * 4, n * 4, 0, n * 4 - 1, n * 4 + 4, 3, n * 8]))
            req.raw_input_contents.append(draw(st.binary(min_size=max(size, 0),
                                                         max_size=max(size, 0)))
                                          if size < 64 else b"\x01" * max(size, 0))
        else:
            k = draw(st.sampled_from([n, n, 0, n + 1, max(n - 1, 0)]))
            field = draw(st.sampled_from(["fp32_contents", "int64_contents", "bytes_contents",
                                          "bool_contents", "fp64_contents"]))
            values = {"fp32_contents": st.floats(width=32, allow_nan=True),
                      "fp64_contents": st.floats(allow_nan=True),
                      "int64_contents": st.integers(-(2**63), 2**63 - 1),
                      "bytes_contents": st.binary(max_size=4),
                      "bool_contents": st.booleans()}[field]
            getattr(t.contents, field).extend(
                draw(st.lists(values, min_size=k, max_size=k)) if k <= 16
                else [draw(values)] * k)
    if draw(st.booleans()) and use_raw:  # raw contents not matching the inputs
        req.raw_input_contents.append(draw(st.binary(max_size=16)))
    for _ in range(draw(st.integers(0, 2))):
        o = req.outputs.add(name=draw(st.sampled_from(["probs", "", "nope"])))
        for key, value in draw(params).items():
            o.parameters[key].CopyFrom(value)
    return req


@st.composite
def near_valid_requests(draw: st.DrawFn) -> pb.ModelInferRequest:
    """A valid request with at most one thing wrong (so the fuzz reaches the deeper code)."""
    batch = draw(st.integers(1, 4))
    x = np.asarray(draw(st.lists(st.floats(-1e3, 1e3, width=32), min_size=batch * 64,
                                 max_size=batch * 64)), np.float32).reshape(batch, 64)
    req = pb.ModelInferRequest(model_name="mlp")
    t = req.inputs.add(name="input", datatype="FP32", shape=[batch, 64])
    raw = draw(st.booleans())
    if raw:
        req.raw_input_contents.append(x.tobytes())
    else:
        t.contents.fp32_contents.extend(x.ravel().tolist())
    if draw(st.booleans()):
        req.outputs.add(name="probs")
    mutation = draw(st.sampled_from(["none", "none", "version", "model", "shape", "dtype",
                                     "length", "extra-raw", "output", "params", "name",
                                     "both-contents", "huge-shape"]))
    if mutation == "version":
        req.model_version = draw(st.sampled_from(["1", "2", "0", "-1", "x", "9" * 30]))
    elif mutation == "model":
        req.model_name = draw(st.sampled_from(["nope", "", "mlp ", "MLP"]))
    elif mutation == "shape":
        t.shape[draw(st.integers(0, 1))] = draw(dims)
    elif mutation == "dtype":
        t.datatype = draw(st.sampled_from(DTYPES))
    elif mutation == "length" and raw:
        req.raw_input_contents[0] = req.raw_input_contents[0][:draw(st.integers(0, 255))]
    elif mutation == "length":
        del t.contents.fp32_contents[-1]
    elif mutation == "extra-raw":
        req.raw_input_contents.append(b"\0" * draw(st.integers(0, 8)))
    elif mutation == "output":
        req.outputs.add(name=draw(names))
    elif mutation == "params":
        for key, value in draw(params).items():
            req.parameters[key].CopyFrom(value)
    elif mutation == "name":
        t.name = draw(names)
    elif mutation == "both-contents":
        t.contents.fp32_contents.extend([1.0] * 64 * batch)
        if not raw:
            req.raw_input_contents.append(x.tobytes())
    elif mutation == "huge-shape":
        t.shape[:] = [2**31, 2**31, 64]
    return req


def _valid(model: str = "mlp") -> pb.ModelInferRequest:
    req = pb.ModelInferRequest(model_name=model)
    req.inputs.add(name="input", datatype="FP32", shape=[1, 64])
    req.raw_input_contents.append(X.tobytes())
    return req


def test_model_infer_fuzz_never_crashes_and_bystanders_are_unaffected(
        agent: InProcessAgent) -> None:
    codes: dict[str, int] = {}
    with grpc.insecure_channel(agent.grpc) as channel, Bystander(agent.grpc, X) as bystander:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)

        @FUZZ
        @given(req=st.one_of(infer_requests(), near_valid_requests()))
        @example(req=_valid(model="nope"))
        @example(req=_valid())
        def check(req: pb.ModelInferRequest) -> None:
            try:
                reply = stub.ModelInfer(req, timeout=30)
            except grpc.RpcError as exc:
                assert exc.code() not in FORBIDDEN, (exc.code(), exc.details(), req)
                assert exc.details(), (exc.code(), req)
                codes[exc.code().name] = codes.get(exc.code().name, 0) + 1
                return
            codes["OK"] = codes.get("OK", 0) + 1
            assert reply.model_name == "mlp" and reply.model_version == "1"

        check()

        @FUZZ
        @given(name=st.sampled_from(["ModelMetadata", "ModelReady", "ModelConfig",
                                     "ModelStatistics"]),
               model=st.text(max_size=30), version=st.text(max_size=25))
        def other(name: str, model: str, version: str) -> None:
            request = getattr(pb, f"{name}Request")(name=model, version=version)
            try:
                getattr(stub, name)(request, timeout=30)
            except grpc.RpcError as exc:
                assert exc.code() not in FORBIDDEN, (name, exc.code(), exc.details())

        other()
    assert not bystander.failures, bystander.failures[:5]
    assert bystander.ok > 0
    # the fuzz reached validation, lookup and real inference
    assert {"OK", "INVALID_ARGUMENT", "NOT_FOUND"} <= set(codes), codes
    # the server is still fine
    with grpc.insecure_channel(agent.grpc) as channel:
        req = pb.ModelInferRequest(model_name="mlp")
        req.inputs.add(name="input", datatype="FP32", shape=[1, 64])
        req.raw_input_contents.append(X.tobytes())
        assert pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(req, timeout=30)


# -- management API ----------------------------------------------------------------------------
versions = st.one_of(st.integers(-3, 5), st.sampled_from([2**31, 2**63 - 1, -(2**63)]))
floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                   st.sampled_from([0.0, -1.0, 1e300]))
calls = st.one_of(
    st.builds(lambda m, v, f: ("Activate", mpb.ActivateRequest(model=m, version=v, force=f)),
              names, versions, st.booleans()),
    st.builds(lambda m, v: ("Rollback", mpb.RollbackRequest(model=m, to_version=v)),
              names | st.just("mlp"), versions),
    st.builds(lambda m, v: ("RemoveVersion", mpb.RemoveVersionRequest(model=m, version=v)),
              names | st.just("mlp"), versions),
    st.builds(lambda m, a, b, s, p: ("QueryMetrics", mpb.QueryMetricsRequest(
        model=m, start=a, end=b, step_s=s, per_version=p)),
        names | st.just("mlp"), floats, floats, st.integers(-(2**31), 2**31 - 1),
        st.booleans()),
    st.builds(lambda m, n: ("ListDeployments", mpb.ListDeploymentsRequest(model=m, limit=n)),
              names, st.integers(-(2**31), 2**31 - 1)),
    st.builds(lambda m: ("ListModels", mpb.ListModelsRequest(model=m)), names),
)
deploy_parts = st.lists(st.one_of(
    st.builds(lambda f, n, force: mpb.DeployRequest(header=mpb.DeployHeader(
        filename=f, size_bytes=n, force=force)),
        st.text(max_size=20), st.integers(-(2**63), 2**63 - 1) | st.integers(0, 4096),
        st.booleans()),
    st.binary(max_size=2048).map(lambda b: mpb.DeployRequest(chunk=b)),
    st.just(mpb.DeployRequest())), max_size=5)


def test_management_fuzz_never_crashes_and_changes_nothing(agent: InProcessAgent) -> None:
    with grpc.insecure_channel(agent.management) as channel, \
            Bystander(agent.grpc, X) as bystander:
        stub = mpb_grpc.AgentManagementStub(channel)
        auth = bearer(agent.token)

        @FUZZ
        @given(call=calls)
        def unary(call: tuple[str, object]) -> None:
            method, request = call
            try:
                getattr(stub, method)(request, metadata=auth, timeout=60)
            except grpc.RpcError as exc:
                assert exc.code() not in FORBIDDEN, (method, exc.code(), exc.details(), request)
                assert exc.details()

        @FUZZ
        @given(parts=deploy_parts)
        def deploy(parts: list[mpb.DeployRequest]) -> None:
            try:
                for event in stub.Deploy(iter(parts), metadata=auth, timeout=60):
                    if event.WhichOneof("event") == "result":
                        assert not event.result.ok
            except grpc.RpcError as exc:
                assert exc.code() not in FORBIDDEN, (exc.code(), exc.details(), parts)
                assert exc.details()

        unary()
        deploy()
    assert not bystander.failures, bystander.failures[:5]
    with AgentClient(agent.management, token=agent.token) as client:
        assert [(v.model, v.version, v.active) for v in client.models()] == [("mlp", 1, True)]
        assert not any((agent.state_dir / "incoming").iterdir())
        assert all(d.status != "in_progress" for d in client.deployments(limit=1000))


@pytest.mark.parametrize(("start", "end", "step"), [(float("nan"), 0.0, 60), (1e300, 0.0, 60),
                                                    (0.0, float("inf"), 60), (-5.0, 0.0, 60),
                                                    (0.0, 0.0, -1)])
def test_query_metrics_out_of_range_is_invalid_argument(agent: InProcessAgent, start: float,
                                                        end: float, step: int) -> None:
    """Found by the fuzz: these were an OverflowError/ValueError inside the servicer (UNKNOWN)."""
    with grpc.insecure_channel(agent.management) as channel, \
            pytest.raises(grpc.RpcError) as err:
        mpb_grpc.AgentManagementStub(channel).QueryMetrics(
            mpb.QueryMetricsRequest(model="mlp", start=start, end=end, step_s=step),
            metadata=bearer(agent.token), timeout=30)
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "QueryMetrics" in (err.value.details() or "")
