"""System shared memory with the unmodified tritonclient.grpc client and its shared memory
utilities against a real agent server; hostile registrations and references are refused."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as tc
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from edge_agent.errors import AgentError, InvalidInputError
from edge_agent.frontends.common.shared_memory import (
    Callers,
    RegionNotFoundError,
    SharedMemoryRegistry,
    TooManyRegionsError,
)
from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb
from edge_agent.frontends.grpc.generated import grpc_service_pb2_grpc as pb_grpc
from tests.fastpath.conftest import MlpBundles, Served
from tests.support.core_bundles import reference_outputs

AGENT = Callers.agent("this test")
ROW_BYTES = 64 * 4
OUT_BYTES = 10 * 4

Regions = Callable[[int], tuple[str, str, Any]]


def _rows(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 64)).astype(np.float32)


@pytest.fixture(params=["tcp", "uds"])
def client(request: pytest.FixtureRequest, served: Served) -> Iterator[tc.InferenceServerClient]:
    url = served.tcp if request.param == "tcp" else f"unix:{served.uds}"
    c = tc.InferenceServerClient(url)
    try:
        yield c
    finally:
        c.unregister_system_shared_memory()
        c.close()


@pytest.fixture
def regions() -> Iterator[Regions]:
    """Creates shared memory objects with unique keys (/dev/shm is shared by the machine)
    through tritonclient's own utilities; destroys them afterwards."""
    made: list[Any] = []

    def make(byte_size: int) -> tuple[str, str, Any]:
        tag = f"edge_fastpath_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        handle = shm.create_shared_memory_region(tag, f"/{tag}", byte_size)
        made.append(handle)
        return tag, f"/{tag}", handle

    try:
        yield make
    finally:
        for handle in made:
            shm.destroy_shared_memory_region(handle)


def _code(exc: pytest.ExceptionInfo[InferenceServerException]) -> str:
    return str(exc.value.status())


def test_extension_is_advertised_and_status_lists_regions(
        client: tc.InferenceServerClient, regions: Regions) -> None:
    assert "system_shared_memory" in client.get_server_metadata().extensions
    name, key, _ = regions(1024)
    client.register_system_shared_memory(name, key, 512, offset=256)
    status = client.get_system_shared_memory_status(name)
    region = status.regions[name]
    assert (region.key, region.offset, region.byte_size) == (key, 256, 512)
    assert name in client.get_system_shared_memory_status().regions
    client.unregister_system_shared_memory(name)
    assert name not in client.get_system_shared_memory_status().regions
    with pytest.raises(InferenceServerException) as err:
        client.get_system_shared_memory_status(name)
    assert "NOT_FOUND" in _code(err) and name in err.value.message()


def test_inputs_and_outputs_in_shared_memory(client: tc.InferenceServerClient,
                                             regions: Regions, mlp_bundles: MlpBundles) -> None:
    x = _rows(4, seed=11)
    in_name, in_key, in_handle = regions(x.nbytes + 128)
    out_name, out_key, out_handle = regions(4 * OUT_BYTES)
    shm.set_shared_memory_region(in_handle, [x], offset=128)
    client.register_system_shared_memory(in_name, in_key, x.nbytes + 128)
    client.register_system_shared_memory(out_name, out_key, 4 * OUT_BYTES)
    inp = tc.InferInput("input", list(x.shape), "FP32")
    inp.set_shared_memory(in_name, x.nbytes, offset=128)
    out = tc.InferRequestedOutput("probs")
    out.set_shared_memory(out_name, 4 * OUT_BYTES)
    result = client.infer("mlp", [inp], outputs=[out])
    response = result.get_response()
    assert list(response.raw_output_contents) == [b""]  # no tensor bytes, Triton's layout
    meta = result.get_output("probs")
    assert list(meta.shape) == [4, 10] and meta.datatype == "FP32"
    got = shm.get_contents_as_numpy(out_handle, np.float32, [4, 10])
    expected = reference_outputs(mlp_bundles.v1_onnx, {"input": x})["probs"]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_input_in_shared_memory_output_in_the_response(
        client: tc.InferenceServerClient, regions: Regions, mlp_bundles: MlpBundles) -> None:
    x = _rows(2, seed=12)
    name, key, handle = regions(x.nbytes)
    shm.set_shared_memory_region(handle, [x])
    client.register_system_shared_memory(name, key, x.nbytes)
    inp = tc.InferInput("input", list(x.shape), "FP32")
    inp.set_shared_memory(name, x.nbytes)
    result = client.infer("mlp", [inp])
    expected = reference_outputs(mlp_bundles.v1_onnx, {"input": x})["probs"]
    np.testing.assert_allclose(result.as_numpy("probs"), expected, rtol=1e-4, atol=1e-5)


def _register_error(client: tc.InferenceServerClient, name: str, key: str, size: int,
                    offset: int = 0) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as err:
        client.register_system_shared_memory(name, key, size, offset=offset)
    assert "INVALID_ARGUMENT" in _code(err), err.value
    return err.value


def test_hostile_registrations_are_refused(client: tc.InferenceServerClient,
                                           regions: Regions, tmp_path: Path) -> None:
    name, key, _ = regions(256)
    for bad_key in ("/../etc/passwd", "/a/b", "", "/..", "etc/passwd/"):
        assert "does not name a shared memory object" in \
            _register_error(client, "bad", bad_key, 16).message()
    assert "no shared memory object" in \
        _register_error(client, "gone", f"/missing_{uuid.uuid4().hex}", 16).message()
    err = _register_error(client, name, key, 200, offset=100)
    assert "past the end" in err.message() and name in err.message()
    assert "byte_size must be > 0" in _register_error(client, name, key, 0).message()
    link = f"edge_fastpath_link_{uuid.uuid4().hex[:8]}"
    target = tmp_path / "target"
    target.write_bytes(b"x" * 64)
    os.symlink(target, f"/dev/shm/{link}")
    try:
        assert "symbolic link" in _register_error(client, "link", f"/{link}", 16).message()
    finally:
        os.unlink(f"/dev/shm/{link}")
    fifo = f"edge_fastpath_fifo_{uuid.uuid4().hex[:8]}"
    os.mkfifo(f"/dev/shm/{fifo}")
    try:  # never opened: opening a FIFO could block the agent
        assert "not a regular file" in _register_error(client, "fifo", f"/{fifo}", 16).message()
    finally:
        os.unlink(f"/dev/shm/{fifo}")
    client.register_system_shared_memory(name, key, 256)
    with pytest.raises(InferenceServerException) as dup:
        client.register_system_shared_memory(name, key, 256)
    assert "ALREADY_EXISTS" in _code(dup)
    assert list(client.get_system_shared_memory_status().regions) == [name]


@pytest.mark.skipif(os.geteuid() != 0, reason="creating another user's object needs root")
def test_an_object_owned_by_another_user_is_refused_over_tcp(served: Served,
                                                             regions: Regions) -> None:
    """Over TCP (configured on) callers are taken as the agent's user; over the Unix socket
    the rule is who may connect (tests/security/test_shm_deputy.py)."""
    name, key, _ = regions(256)
    os.chown(f"/dev/shm{key}", 65534, -1)
    with tc.InferenceServerClient(served.tcp) as client:
        assert "belongs to uid 65534" in _register_error(client, name, key, 256).message()


def _infer_error(client: tc.InferenceServerClient, inputs: list[tc.InferInput],
                 outputs: list[tc.InferRequestedOutput] | None = None) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as err:
        client.infer("mlp", inputs, outputs=outputs)
    return err.value


def test_bad_references_are_refused_and_the_agent_goes_on(
        client: tc.InferenceServerClient, regions: Regions) -> None:
    x = _rows(1, seed=13)
    name, key, handle = regions(ROW_BYTES * 2)
    shm.set_shared_memory_region(handle, [x])
    client.register_system_shared_memory(name, key, ROW_BYTES * 2)

    def inp(region: str, size: int, offset: int = 0) -> tc.InferInput:
        return tc.InferInput("input", [1, 64], "FP32").set_shared_memory(region, size, offset)

    err = _infer_error(client, [inp("nope", ROW_BYTES)])
    assert "NOT_FOUND" in str(err.status()) and "'nope'" in err.message()
    err = _infer_error(client, [inp(name, ROW_BYTES, offset=ROW_BYTES + 4)])
    assert "INVALID_ARGUMENT" in str(err.status()) and "do not fit" in err.message()
    err = _infer_error(client, [inp(name, ROW_BYTES - 4)])
    assert "INVALID_ARGUMENT" in str(err.status()) and "does not match shape" in err.message()
    small = tc.InferRequestedOutput("probs")
    small.set_shared_memory(name, 8)
    err = _infer_error(client, [inp(name, ROW_BYTES)], [small])
    assert "INVALID_ARGUMENT" in str(err.status()) and "do not fit" in err.message()
    past = tc.InferRequestedOutput("probs")
    past.set_shared_memory(name, OUT_BYTES, offset=2 * ROW_BYTES - 8)
    err = _infer_error(client, [inp(name, ROW_BYTES)], [past])
    assert "INVALID_ARGUMENT" in str(err.status()) and name in err.message()
    # the client truncates its object under the agent: an error, not a SIGBUS
    os.truncate(f"/dev/shm{key}", 16)
    err = _infer_error(client, [inp(name, ROW_BYTES)])
    assert "INVALID_ARGUMENT" in str(err.status()) and "truncated" in err.message()
    os.truncate(f"/dev/shm{key}", ROW_BYTES * 2)
    shm.set_shared_memory_region(handle, [x])
    assert client.infer("mlp", [inp(name, ROW_BYTES)]).as_numpy("probs").shape == (1, 10)
    client.unregister_system_shared_memory(name)
    err = _infer_error(client, [inp(name, ROW_BYTES)])
    assert "NOT_FOUND" in str(err.status())
    assert client.is_server_live()


def test_cuda_shared_memory_says_it_is_not_served(served: Served) -> None:
    with grpc.insecure_channel(served.tcp) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as err:
            stub.CudaSharedMemoryRegister(pb.CudaSharedMemoryRegisterRequest(name="gpu0"))
    assert err.value.code() is grpc.StatusCode.UNIMPLEMENTED
    assert "CUDA shared memory is not served" in (err.value.details() or "")


def test_a_region_unregistered_while_in_use_stays_open_until_done(regions: Regions) -> None:
    name, key, _ = regions(64)
    registry = SharedMemoryRegistry()
    region = registry.register(name, key, 0, 64, AGENT)
    with region.open() as fd:
        registry.unregister(name)
        assert os.fstat(fd).st_size == 64  # still open: this request finishes its I/O
        with pytest.raises(RegionNotFoundError, match=name), region.open():
            pass
    with pytest.raises(OSError):
        os.fstat(fd)  # closed once the last user was done
    with pytest.raises(RegionNotFoundError):
        registry.get(name)


def test_too_many_regions_are_refused(regions: Regions) -> None:
    registry = SharedMemoryRegistry(max_regions=2)
    for i in range(2):
        _, key, _ = regions(16)
        registry.register(f"r{i}", key, 0, 16, AGENT)
    _, key, _ = regions(16)
    with pytest.raises(TooManyRegionsError, match="already holds 2 regions"):
        registry.register("r2", key, 0, 16, AGENT)
    registry.close()
    assert registry.status() == []


def test_registry_errors_are_agent_errors() -> None:
    registry = SharedMemoryRegistry()
    with pytest.raises(InvalidInputError):
        registry.register("", "/x", 0, 1, AGENT)
    with pytest.raises(AgentError):
        registry.read_input(("nope", 0, 4), "input", np.dtype(np.float32), [1])


def test_stream_infer_with_shared_memory_and_cache_statistics(
        served: Served, regions: Regions, mlp_bundles: MlpBundles) -> None:
    """ModelStreamInfer reads and writes regions too; repeated inputs are cache hits that
    ModelStatistics reports in Triton's cache_hit / cache_miss fields."""
    x = _rows(1, seed=21)
    in_name, in_key, in_handle = regions(ROW_BYTES)
    out_name, out_key, out_handle = regions(3 * OUT_BYTES)
    shm.set_shared_memory_region(in_handle, [x])
    client = tc.InferenceServerClient(served.tcp)
    before = client.get_inference_statistics("mlp", "1").model_stats[0].inference_stats
    answers: list[Any] = []
    try:
        client.register_system_shared_memory(in_name, in_key, ROW_BYTES)
        client.register_system_shared_memory(out_name, out_key, 3 * OUT_BYTES)
        client.start_stream(callback=lambda result, error: answers.append((result, error)))
        for i in range(3):
            inp = tc.InferInput("input", [1, 64], "FP32").set_shared_memory(in_name, ROW_BYTES)
            out = tc.InferRequestedOutput("probs")
            out.set_shared_memory(out_name, OUT_BYTES, offset=i * OUT_BYTES)
            client.async_stream_infer("mlp", [inp], outputs=[out], request_id=str(i))
        client.stop_stream()  # waits for every answer
        assert [error for _, error in answers] == [None] * 3
        got = shm.get_contents_as_numpy(out_handle, np.float32, [3, 10])
        expected = reference_outputs(mlp_bundles.v1_onnx, {"input": x})["probs"]
        for row in got:
            np.testing.assert_allclose(row, expected[0], rtol=1e-4, atol=1e-5)
        after = client.get_inference_statistics("mlp", "1").model_stats[0].inference_stats
        hits = after.cache_hit.count - before.cache_hit.count
        misses = after.cache_miss.count - before.cache_miss.count
        assert hits + misses == 3  # pipelined: the first answer may not be stored in time
        # a unary repeat is a hit once the stream's answer is stored (a done callback)
        inp = tc.InferInput("input", [1, 64], "FP32").set_shared_memory(in_name, ROW_BYTES)
        for _ in range(200):
            client.infer("mlp", [inp])
            stats = client.get_inference_statistics("mlp", "1").model_stats[0].inference_stats
            if stats.cache_hit.count > after.cache_hit.count:
                break
        assert stats.cache_hit.count > after.cache_hit.count
    finally:
        client.unregister_system_shared_memory()
        client.close()


def test_malformed_shared_memory_parameters_are_invalid_argument(served: Served) -> None:
    """Parameters of the wrong type or sign, given by hand, never reach the region."""

    def request(**params: pb.InferParameter) -> pb.ModelInferRequest:
        msg = pb.ModelInferRequest(model_name="mlp")
        tensor = msg.inputs.add(name="input", datatype="FP32", shape=[1, 64])
        for key, value in params.items():
            tensor.parameters[key].CopyFrom(value)
        return msg

    region = pb.InferParameter(string_param="r")
    cases = {
        "region is not a string": request(shared_memory_region=pb.InferParameter(int64_param=1),
                                          shared_memory_byte_size=pb.InferParameter(
                                              int64_param=ROW_BYTES)),
        "byte size missing": request(shared_memory_region=region),
        "byte size is a bool": request(shared_memory_region=region,
                                       shared_memory_byte_size=pb.InferParameter(
                                           bool_param=True)),
        "negative offset": request(shared_memory_region=region,
                                   shared_memory_byte_size=pb.InferParameter(
                                       int64_param=ROW_BYTES),
                                   shared_memory_offset=pb.InferParameter(int64_param=-8)),
    }
    with grpc.insecure_channel(served.tcp) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        for label, msg in cases.items():
            with pytest.raises(grpc.RpcError) as err:
                stub.ModelInfer(msg)
            assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT, label
            assert "shared_memory" in (err.value.details() or ""), label


def test_a_system_without_the_shared_memory_directory_says_so(tmp_path: Path) -> None:
    registry = SharedMemoryRegistry(shm_dir=str(tmp_path / "missing"))
    assert not registry.available
    with pytest.raises(InvalidInputError, match="this system has no"):
        registry.register("r", "/x", 0, 16, AGENT)
