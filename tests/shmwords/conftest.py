"""A real agent serving Triton's example model ``simple_string`` (a Python model: two BYTES
inputs of 16 integer strings -> their sum and difference as strings) over gRPC and HTTP, with
repository control on, for the Triton-compatibility tests here."""

from __future__ import annotations

import contextlib
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import tritonclient.grpc as tg
import tritonclient.http as th

from edge_agent.cli import main as agent_cli
from edge_agent.config import load_config
from packager.build import build_bundles
from packager.bundle.signing import generate_keypair
from tests.support.harness import running

PROFILE = "x86_64-cpu-onnxruntime"

SIMPLE_STRING = '''
import numpy as np


def add_sub(inputs, ctx):
    a = inputs["INPUT0"].astype(np.int64)
    b = inputs["INPUT1"].astype(np.int64)
    def text(values):
        return np.array([str(int(v)).encode() for v in values.reshape(-1)],
                        dtype=object).reshape(values.shape)
    return {"OUTPUT0": text(a + b), "OUTPUT1": text(a - b)}
'''


def simple_string_spec(directory: Path, extra: str = "") -> Path:
    """The spec of ``simple_string`` as Triton's examples expect it ([batch, 16] BYTES)."""
    (directory / "simple_string.py").write_text(SIMPLE_STRING)
    path = directory / "simple_string.toml"
    io = "\n".join(f'[[{kind}]]\nname = "{kind[:-1].upper()}{i}"\ndatatype = "BYTES"\n'
                   "shape = [16]\n" for kind in ("inputs", "outputs") for i in (0, 1))
    path.write_text(textwrap.dedent(f'''\
        name = "simple_string"
        kind = "python"
        source = ["simple_string.py"]
        entry = "simple_string:add_sub"
        max_batch_size = 8
        {extra}
        ''') + io)
    return path


@dataclass(frozen=True)
class Agent:
    """The running agent's addresses: gRPC ``host:port`` and HTTP ``host:port``."""

    grpc: str
    http: str


@pytest.fixture(scope="session")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    root = tmp_path_factory.mktemp("shmwords")
    private, public = generate_keypair(root / "keys")
    (bundle,) = build_bundles(simple_string_spec(root), name="", version=1,
                              profiles=[PROFILE], out_dir=root / "out", key_path=private)
    state = root / "state"
    assert agent_cli(["add-bundle", "--state-dir", str(state), "--pubkey", str(public),
                      str(bundle)]) == 0
    toml = root / "agent.toml"
    toml.write_text("[grpc]\nrepository_control = true\ntcp_shared_memory = true\n"
                    "[http]\nshared_memory = true\n")  # shared memory over TCP: configured
    with serving(state, toml, "shmwords-agent") as served:
        yield served


@contextlib.contextmanager
def serving(state: Path, toml: Path | None, name: str) -> Iterator[Agent]:
    """An in-process agent on ``state`` with gRPC and HTTP on 127.0.0.1 port 0 (no Unix
    socket), stopped on exit."""
    config = load_config(toml, state_dir=state, grpc_address="127.0.0.1:0", no_uds=True,
                         http_address="127.0.0.1:0")
    with running(config, timeout_s=180, name=name) as served:
        addresses = served.addresses
        assert addresses is not None and addresses.tcp and addresses.http
        yield Agent(grpc=addresses.tcp, http=addresses.http)


@pytest.fixture(params=["grpc", "http"])
def client(request: pytest.FixtureRequest, agent: Agent) -> Iterator[Any]:
    """The unmodified tritonclient of each protocol; no system shared memory region is left
    registered afterwards."""
    c: Any = (tg.InferenceServerClient(agent.grpc) if request.param == "grpc"
              else th.InferenceServerClient(agent.http))
    try:
        yield c
    finally:
        c.unregister_system_shared_memory()
        c.close()
