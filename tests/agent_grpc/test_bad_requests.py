"""Every bad request gets the right status code and a message naming the problem, while good
requests keep being served."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb
from tests.agent_grpc.conftest import MAX_MESSAGE_BYTES, Agent, Sources

INVALID = grpc.StatusCode.INVALID_ARGUMENT


def _request(model: str = "mlp", version: str = "1", **arrays: np.ndarray) -> pb.ModelInferRequest:
    msg = pb.ModelInferRequest(model_name=model, model_version=version)
    if not arrays:
        arrays = {"input": np.ones((2, 64), np.float32)}
    for name, a in arrays.items():
        dt = {"float32": "FP32", "float64": "FP64", "int64": "INT64"}[str(a.dtype)]
        msg.inputs.add(name=name, datatype=dt, shape=a.shape)
        msg.raw_input_contents.append(a.tobytes())
    return msg


def _short_raw() -> pb.ModelInferRequest:
    msg = _request()
    msg.raw_input_contents[0] = msg.raw_input_contents[0][:-4]
    return msg


def _empty_but_huge(typed: bool) -> pb.ModelInferRequest:
    """An empty tensor (a zero dim) whose other dims no array could have (found by the fuzz)."""
    msg = pb.ModelInferRequest(model_name="mlp", model_version="1")
    tensor = msg.inputs.add(name="input", datatype="FP32", shape=[0, 1 << 40, 1 << 40])
    if typed:
        tensor.contents.fp32_contents.extend([])
        tensor.contents.SetInParent()
    else:
        msg.raw_input_contents.append(b"")
    return msg


CASES = [
    ("empty tensor huge dims raw", lambda: _empty_but_huge(False), INVALID, "can hold"),
    ("empty tensor huge dims typed", lambda: _empty_but_huge(True), INVALID, "can hold"),
    ("wrong dtype", lambda: _request(input=np.ones((2, 64), np.float64)), INVALID, "'input'"),
    ("wrong shape", lambda: _request(input=np.ones((2, 63), np.float32)), INVALID, "'input'"),
    ("missing input", lambda: _request(other=np.ones((2, 64), np.float32)), INVALID, "'input'"),
    ("extra input", lambda: _request(input=np.ones((2, 64), np.float32),
                                     extra=np.ones((2, 64), np.float32)), INVALID, "extra"),
    ("raw length", _short_raw, INVALID, "'input'"),
    ("batch too large", lambda: _request(input=np.ones((1000, 64), np.float32)), INVALID,
     "max_batch_size"),
    ("unknown model", lambda: _request(model="nope"), grpc.StatusCode.NOT_FOUND, "'nope'"),
    ("unknown version", lambda: _request(version="77"), grpc.StatusCode.NOT_FOUND, "77"),
    ("empty request", pb.ModelInferRequest, INVALID, "empty request"),
    ("over size limit", lambda: _request(
        input=np.ones((MAX_MESSAGE_BYTES // 256 + 8, 64), np.float32)),
     grpc.StatusCode.RESOURCE_EXHAUSTED, ""),
]


@pytest.mark.parametrize(("label", "make", "code", "needle"), CASES, ids=[c[0] for c in CASES])
def test_bad_request(uds_stub, sources: Sources, label, make, code, needle) -> None:
    with pytest.raises(grpc.RpcError) as err:
        uds_stub.ModelInfer(make(), timeout=60)
    assert err.value.code() == code, err.value.details()
    assert needle in (err.value.details() or ""), err.value.details()
    # and the agent keeps answering good requests
    x = np.random.default_rng(len(label)).random((2, 64), dtype=np.float32)
    good = uds_stub.ModelInfer(_request(input=x), timeout=60)
    got = np.frombuffer(good.raw_output_contents[0], np.float32).reshape(2, 10)
    np.testing.assert_allclose(got, sources.reference("mlp", x), atol=1e-5)


def test_typed_contents_with_our_stub(uds_stub, sources: Sources) -> None:
    x = np.random.default_rng(4).random((3, 64), dtype=np.float32)
    msg = pb.ModelInferRequest(model_name="mlp", model_version="2", id="typed")
    t = msg.inputs.add(name="input", datatype="FP32", shape=x.shape)
    t.contents.fp32_contents.extend(x.ravel().tolist())
    msg.outputs.add(name="probs")
    response = uds_stub.ModelInfer(msg, timeout=60)
    assert response.id == "typed" and response.model_version == "2"
    out = response.outputs[0]
    assert (out.name, out.datatype, list(out.shape)) == ("probs", "FP32", [3, 10])
    assert not out.HasField("contents")  # raw out whatever came in, as Triton answers
    got = np.frombuffer(response.raw_output_contents[0], np.float32).reshape(3, 10)
    np.testing.assert_allclose(got, sources.reference("mlp", x), atol=1e-4)


def test_concurrent_callers_get_their_own_rows(uds_stub, sources: Sources) -> None:
    """16 threads, different inputs and row counts, through the batcher at once."""
    rng = np.random.default_rng(21)
    jobs = [rng.random((1 + i % 4, 64), dtype=np.float32) for i in range(160)]
    versions = ["1", "2"]

    def call(i: int) -> tuple[int, np.ndarray]:
        x = jobs[i]
        response = uds_stub.ModelInfer(_request(version=versions[i % 2], input=x), timeout=60)
        assert response.model_version == versions[i % 2]
        return i, np.frombuffer(response.raw_output_contents[0], np.float32).reshape(len(x), 10)

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(call, range(len(jobs))))
    for i, got in results:
        np.testing.assert_allclose(got, sources.reference("mlp", jobs[i]), atol=1e-4)


def test_full_queue_is_resource_exhausted(uds_stub, sources: Sources) -> None:
    """squeeze_tinyq has max_queue_size 1: a burst overflows it; the rest are served right."""
    x = np.random.default_rng(8).random((1, 3, 224, 224), dtype=np.float32)
    start = threading.Barrier(24)

    def call(_: int) -> grpc.StatusCode | np.ndarray:
        start.wait()
        try:
            r = uds_stub.ModelInfer(_request(model="squeeze_tinyq", data_0=x), timeout=60)
        except grpc.RpcError as exc:
            assert "queue" in (exc.details() or "").lower(), exc.details()
            return exc.code()
        return np.frombuffer(r.raw_output_contents[0], np.float32).reshape(1, 1000, 1, 1)

    with ThreadPoolExecutor(24) as pool:
        outcomes = list(pool.map(call, range(24)))
    codes = [o for o in outcomes if isinstance(o, grpc.StatusCode)]
    served = [o for o in outcomes if isinstance(o, np.ndarray)]
    assert codes and set(codes) == {grpc.StatusCode.RESOURCE_EXHAUSTED}
    assert served
    for got in served:
        np.testing.assert_allclose(got, sources.reference("squeezenet", x), atol=1e-4)


def test_health_service_reports_serving(agent: Agent) -> None:
    for target in (agent.uds_target, agent.tcp):
        with grpc.insecure_channel(target) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            for service in ("", "inference.GRPCInferenceService"):
                reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=30)
                assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_unix_socket_mode(agent: Agent) -> None:
    assert agent.addresses.uds is not None
    assert agent.addresses.uds.is_socket()
    assert agent.addresses.uds.stat().st_mode & 0o777 == 0o660
