"""System shared memory as a confused deputy (issue 27): the agent opens an object for its
caller, so it must not open one the caller could not. grpcio gives no peer credentials, so over
the Unix socket every user who may connect counts as a possible caller (the socket's owner,
its group's members, anyone when it is world-writable) and an object is registered only when
each of them could open it read-write; over TCP and HTTP shared memory is off unless configured.
The second user below is a real other uid (root setuid()s a subprocess to nobody)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as tc
from tritonclient.utils import InferenceServerException

from edge_agent.client.agent_client import AgentClient
from edge_agent.config import AgentConfig, GrpcConfig
from edge_agent.config.http import HttpConfig
from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb
from edge_agent.frontends.grpc.generated import grpc_service_pb2_grpc as pb_grpc
from tests.support.bundles import Bundles
from tests.support.harness import InProcessAgent, run_configured, sections

NOBODY = 65534  # nobody, and nogroup: nobody's primary group (also sync's and _apt's here)


@contextlib.contextmanager
def shm_agent(state_dir: Path, bundles: Bundles, **grpc_keys: object
              ) -> Iterator[tuple[InProcessAgent, Path]]:
    """An agent serving mlp v1 on TCP, HTTP and a Unix socket in a directory every user may
    traverse (/tmp/deputy-*, 0755); stopped and cleaned up on exit."""
    run_dir = Path(tempfile.mkdtemp(prefix="deputy-", dir="/tmp"))
    try:
        run_dir.chmod(0o755)
        sock = run_dir / "i.sock"
        config = AgentConfig(state_dir=state_dir, http=HttpConfig(listen="127.0.0.1:0"),
                             grpc=GrpcConfig(address="127.0.0.1:0", uds=sock, uds_enabled=True,
                                             **grpc_keys))  # type: ignore[arg-type]
        agent = run_configured(config, sections("deputy", bundles.public_key, insecure=True))
        try:
            with AgentClient(agent.management, token=agent.token) as client:
                assert client.deploy(bundles.mlp[1]).ok
            yield agent, sock
        finally:
            agent.stop()
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


@contextlib.contextmanager
def shm_object(size: int, mode: int = 0o600, owner: int = -1, group: int = -1,
               data: bytes = b"") -> Iterator[str]:
    """A /dev/shm object (unique name) of ``size`` bytes; its key; removed on exit."""
    name = f"edge_deputy_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    path = f"/dev/shm/{name}"
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode)
    try:
        os.ftruncate(fd, size)
        os.pwrite(fd, data, 0)
        os.fchmod(fd, mode)
        if owner != -1 or group != -1:
            os.fchown(fd, owner, group)
        yield f"/{name}"
    finally:
        os.close(fd)
        os.unlink(path)


def _status(err: pytest.ExceptionInfo[InferenceServerException]) -> str:
    return f"{err.value.status()} {err.value.message()}"


def test_tcp_and_http_refuse_shared_memory_unless_configured(bundles: Bundles,
                                                             tmp_path: Path) -> None:
    with shm_agent(tmp_path / "state", bundles) as (agent, sock), \
            shm_object(64 * 4 + 40) as key, \
            tc.InferenceServerClient(f"unix:{sock}") as uds, \
            tc.InferenceServerClient(agent.tcp) as tcp:
        uds.register_system_shared_memory("frame", key, 64 * 4 + 40)  # the socket serves it
        assert "system_shared_memory" in uds.get_server_metadata().extensions
        assert "system_shared_memory" not in tcp.get_server_metadata().extensions
        for call in (lambda: tcp.register_system_shared_memory("t", key, 16),
                     lambda: tcp.get_system_shared_memory_status(),
                     lambda: tcp.unregister_system_shared_memory()):
            with pytest.raises(InferenceServerException) as err:
                call()
            assert "FAILED_PRECONDITION" in _status(err)
            assert "[grpc] tcp_shared_memory = true" in _status(err)
        # a region registered over the socket cannot be read (or written) from TCP either
        inp = tc.InferInput("input", [1, 64], "FP32")
        inp.set_shared_memory("frame", 64 * 4)
        out = tc.InferRequestedOutput("probs")
        out.set_shared_memory("frame", 40, offset=64 * 4)
        with pytest.raises(InferenceServerException) as err:
            tcp.infer("mlp", [inp], outputs=[out])
        assert "tcp_shared_memory" in _status(err)
        uds.infer("mlp", [inp], outputs=[out])  # served over the socket
        assert list(uds.get_system_shared_memory_status().regions) == ["frame"]
        http_url = f"http://{agent.http}/v2/systemsharedmemory/region/h/register"
        body = json.dumps({"key": key, "offset": 0, "byte_size": 16}).encode()
        import urllib.error
        import urllib.request
        with pytest.raises(urllib.error.HTTPError) as http_err:
            urllib.request.urlopen(urllib.request.Request(http_url, data=body, method="POST"),
                                   timeout=60)
        assert "[http] shared_memory = true" in http_err.value.read().decode()
        with urllib.request.urlopen(f"http://{agent.http}/v2", timeout=60) as meta:
            assert "system_shared_memory" not in json.loads(meta.read())["extensions"]
        uds.unregister_system_shared_memory()


def test_one_user_holds_at_most_its_share_of_regions(bundles: Bundles, tmp_path: Path) -> None:
    with shm_agent(tmp_path / "state", bundles, shared_memory_regions_per_user=2) as (_, sock), \
            contextlib.ExitStack() as stack, \
            tc.InferenceServerClient(f"unix:{sock}") as uds:
        keys = [stack.enter_context(shm_object(16)) for _ in range(3)]
        for i in range(2):
            uds.register_system_shared_memory(f"r{i}", keys[i], 16)
        with pytest.raises(InferenceServerException) as err:
            uds.register_system_shared_memory("r2", keys[2], 16)
        assert "RESOURCE_EXHAUSTED" in _status(err)
        assert f"uid {os.geteuid()}" in _status(err)
        assert "shared_memory_regions_per_user" in _status(err)
        uds.unregister_system_shared_memory()


SECOND_USER = r'''
import json, os, sys
import numpy as np
import tritonclient.grpc as tc
from tritonclient.utils import InferenceServerException

sock, secret, private, shared = sys.argv[1:5]
os.setgroups([])
os.setgid(65534)
os.setuid(65534)  # from here on: nobody, a real second user
results = {"uid": os.getuid()}
with tc.InferenceServerClient("unix:" + sock) as client:
    for name, key in (("secret", secret), ("private", private), ("shared", shared)):
        try:
            client.register_system_shared_memory(name, key, 64 * 4)
            results[name] = "registered"
        except InferenceServerException as exc:
            results[name] = exc.message()
    inp = tc.InferInput("input", [1, 64], "FP32")
    inp.set_shared_memory("secret", 64 * 4)
    try:
        client.infer("mlp", [inp])
        results["read_secret"] = "read"
    except InferenceServerException as exc:
        results["read_secret"] = exc.message()
print(json.dumps(results))
'''


@pytest.mark.skipif(os.geteuid() != 0, reason="a real second user needs root (setuid)")
def test_a_second_user_registers_only_objects_every_caller_could_open(
        bundles: Bundles, tmp_path: Path) -> None:
    size = 64 * 4
    secret_rows = np.full(64, 7.0, np.float32).tobytes()
    with shm_agent(tmp_path / "state", bundles) as (_, sock), \
            shm_object(size, 0o600, data=secret_rows) as secret, \
            shm_object(size, 0o600, NOBODY, NOBODY) as private, \
            shm_object(size, 0o660, NOBODY, NOBODY) as shared:
        os.chown(sock, 0, NOBODY)  # the socket (0660) admits the group nogroup: nobody too
        run = subprocess.run([sys.executable, "-c", SECOND_USER, str(sock), secret, private,
                              shared], capture_output=True, text=True, timeout=120,
                             check=False, cwd="/")
        assert run.returncode == 0, run.stderr
        got = json.loads(run.stdout)
        assert got["uid"] == NOBODY
        # the agent's own 0600 object: nobody could not open it, so the agent does not
        assert "cannot be opened read-write by uid" in got["secret"], got
        assert "65534" in got["secret"]
        assert "not registered" in got["read_secret"], got
        # nobody's own 0600 object: other members of nogroup (sync, _apt) could not open it
        assert "cannot be opened read-write by uid" in got["private"], got
        # 0660 to nogroup: every user who may connect could open it
        assert got["shared"] == "registered", got
        with tc.InferenceServerClient(f"unix:{sock}") as root:
            assert sorted(root.get_system_shared_memory_status().regions) == ["shared"]
            root.unregister_system_shared_memory()


def test_registration_over_a_world_writable_socket_needs_a_world_rw_object(
        bundles: Bundles, tmp_path: Path) -> None:
    with shm_agent(tmp_path / "state", bundles, uds_mode=0o666) as (_, sock), \
            shm_object(64) as private, shm_object(64, 0o666) as open_to_all, \
            tc.InferenceServerClient(f"unix:{sock}") as uds:
        with pytest.raises(InferenceServerException) as err:
            uds.register_system_shared_memory("p", private, 64)
        assert "any local user may call" in _status(err)
        uds.register_system_shared_memory("o", open_to_all, 64)
        uds.unregister_system_shared_memory()


def test_the_raw_refusal_code_over_tcp(bundles: Bundles, tmp_path: Path) -> None:
    """What a client without tritonclient sees: FAILED_PRECONDITION naming the setting."""
    with shm_agent(tmp_path / "state", bundles) as (agent, _), \
            grpc.insecure_channel(agent.tcp) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as err:
            stub.SystemSharedMemoryRegister(pb.SystemSharedMemoryRegisterRequest(
                name="x", key="/x", byte_size=8), timeout=60)
        assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        assert "tcp_shared_memory" in (err.value.details() or "")
