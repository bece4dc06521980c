"""Stopping the inference server drains: a call in flight finishes, and a call that arrives
while it drains gets UNAVAILABLE ("shutting down; retry"), never CANCELLED (which Triton's
clients and most retry policies do not retry). Found under systemd: `systemctl stop` under load
cancelled calls that arrived in the first milliseconds of the stop."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import tritonclient.grpc as tc
from tritonclient.utils import InferenceServerException

from edge_agent.config import load_config
from edge_agent.core.dataplane import DataPlane
from edge_agent.frontends.grpc.admission import BUSY, CLOSING, AdmissionPool, refused
from edge_agent.server import AgentServer
from tests.agent_core.conftest import Bundles
from tests.support.core_bundles import install
from tests.support.eventually import eventually
from tests.support.spin_model import spin_input


def _infer(address: str, x: np.ndarray) -> str:
    with tc.InferenceServerClient(address) as client:
        inp = tc.InferInput("input", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        try:
            client.infer("spin", [inp], client_timeout=120)
        except InferenceServerException as exc:
            return f"{exc.status()} {exc.message()}"
        return "ok"


def test_a_draining_server_finishes_calls_in_flight_and_refuses_new_ones_as_unavailable(
        bundles: Bundles, tmp_path: Path) -> None:
    install(bundles.spin, tmp_path)
    config = load_config(state_dir=tmp_path, grpc_address="127.0.0.1:0", no_uds=True)
    dataplane = DataPlane(tmp_path)
    server = AgentServer(dataplane, config)
    stopper: threading.Thread | None = None
    try:
        address = server.start().tcp
        assert address is not None
        server.mark_serving()
        assert _infer(address, spin_input(0)) == "ok"
        pool = server._pools[0]
        assert isinstance(pool, AdmissionPool)
        # the first call leaves the pool just after its answer: wait, so that the count below
        # is the slow call's
        eventually(lambda: pool.admitted == 0, timeout=60, interval=0.01,
                   message="the first call never left the pool")
        slow: list[str] = []
        in_flight = threading.Thread(target=lambda: slow.append(
            _infer(address, spin_input(1_000_000))))  # a run of a second or more
        in_flight.start()
        eventually(lambda: pool.admitted, timeout=60, interval=0.01,
                   message="the slow call never reached the server")
        stopper = threading.Thread(target=server.stop, kwargs={"grace": 60.0})
        stopper.start()
        eventually(lambda: pool.closing, timeout=60, interval=0.01,
                   message="the server never began to drain")
        late = _infer(address, spin_input(0))
        assert late.startswith("StatusCode.UNAVAILABLE") and "shutting down" in late, late
        in_flight.join(120)
        assert slow == ["ok"]
    finally:
        if stopper is not None:
            stopper.join(120)
        else:
            server.stop(grace=1.0)
        dataplane.close()


def test_the_pool_tells_refused_calls_why() -> None:
    pool = AdmissionPool(1, 1, request_arrival_s=30)
    release = threading.Event()
    why: dict[str, str] = {}
    ran = {name: threading.Event() for name in ("first", "busy", "closing")}

    def call(name: str) -> None:
        if name == "first":
            release.wait(30)
        why[name] = refused()
        ran[name].set()

    try:
        pool.submit(call, "first")
        pool.submit(call, "busy")  # over the limit
        assert ran["busy"].wait(30) and why["busy"] == BUSY
        pool.close()
        pool.submit(call, "closing")
        assert ran["closing"].wait(30) and why["closing"] == CLOSING
        assert not pool.drain(0.05)  # the first call is still running
        release.set()
        assert ran["first"].wait(30) and why["first"] == ""  # admitted: never marked refused
        assert pool.drain(30)
    finally:
        release.set()
        pool.shutdown(wait=True)
