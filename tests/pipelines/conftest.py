"""Real bundles and real agents for the pipeline tests.

Bundles are built once per session with ``edge-pack build`` (the CLI's library entry) from the
specs in examples/pipeline/ and from test specs written here: the MLP (ONNX), prep and post
(Python) and the classify pipeline, all signed; plus misbehaving Python models (hang, crash,
raise). Agents run in-process with the inference port on 127.0.0.1 port 0 and the Unix socket.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from edge_agent.config import AgentConfig, GrpcConfig, HttpConfig, ModelsConfig
from edge_agent.config.models import ModelOverrides
from edge_agent.config.trace import TraceConfig
from packager.build import build_bundles
from packager.bundle.signing import generate_keypair
from packager.samples import make_mlp
from tests.support.harness import InProcessAgent, running, sections

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "pipeline"
PROFILE = "x86_64-cpu-onnxruntime"
if str(EXAMPLE) not in sys.path:
    sys.path.append(str(EXAMPLE))  # the tests compute the example's steps locally (imaging, ...)

MISBEHAVING = '''
import os
import time

import numpy as np


def hang(inputs, ctx):
    if float(inputs["X"].reshape(-1)[0]) < 0:
        time.sleep(3600)
    return {"Y": inputs["X"] * 2}


def crash(inputs, ctx):
    if float(inputs["X"].reshape(-1)[0]) < 0:
        os._exit(3)
    return {"Y": inputs["X"] * 2}


def fail(inputs, ctx):
    if float(inputs["X"].reshape(-1)[0]) < 0:
        raise ValueError("negative input")
    return {"Y": inputs["X"] * 2}
'''


def python_spec(directory: Path, name: str, entry: str, extra: str = "",
                source: str = "bad.py") -> Path:
    """A Python-model spec ``name`` over X (FP32 [4]) -> Y (FP32 [4]) in ``directory``."""
    path = directory / f"{name}.toml"
    path.write_text(textwrap.dedent(f'''\
        name = "{name}"
        kind = "python"
        source = ["{source}"]
        entry = "{entry}"
        max_batch_size = 4
        {extra}
        [[inputs]]
        name = "X"
        datatype = "FP32"
        shape = [4]
        [[outputs]]
        name = "Y"
        datatype = "FP32"
        shape = [4]
        '''))
    return path


def infer_xy(url: str, model: str, x: np.ndarray) -> np.ndarray:
    """``Y`` of a :func:`python_spec` model for ``x`` over gRPC (tritonclient)."""
    import tritonclient.grpc as grpcclient

    with grpcclient.InferenceServerClient(url) as client:
        inp = grpcclient.InferInput("X", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        out = client.infer(model, [inp], client_timeout=120).as_numpy("Y")
        assert out is not None
        return out


@dataclass
class Built:
    root: Path
    public_key: Path
    private_key: Path
    mlp_source: Path
    bundles: dict[str, Path] = field(default_factory=dict)


def build(spec: Path | str, version: int, out: Path, key: Path | None,
          name: str | None = None) -> Path:
    (path,) = build_bundles(spec, name=name or "", version=version, profiles=[PROFILE],
                            out_dir=out, key_path=key)
    return path


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    root = tmp_path_factory.mktemp("pipelines")
    private, public = generate_keypair(root / "keys")
    out = root / "bundles"
    src = root / "src"
    shutil.copytree(EXAMPLE, src)
    (src / "bad.py").write_text(MISBEHAVING)
    mlp = make_mlp(root / "mlp.onnx", seed=5)
    b = Built(root, public, private, mlp)
    (b.bundles["mlp"],) = build_bundles(mlp, name="mlp", version=1, profiles=[PROFILE],
                                        out_dir=out, key_path=private, dynamic_batch=True)
    (b.bundles["mlp2"],) = build_bundles(make_mlp(root / "mlp2.onnx", seed=6), name="mlp",
                                         version=2, profiles=[PROFILE], out_dir=out,
                                         key_path=private, dynamic_batch=True)
    for name in ("prep", "post", "classify"):
        b.bundles[name] = build(src / f"{name}.toml", 1, out, private)
    for name in ("hang", "crash", "fail"):
        b.bundles[name] = build(python_spec(src, name, f"bad:{name}"), 1, out, private)
    return b


Agent = InProcessAgent
"""A running agent of these tests (the harness's in-process mode)."""


@contextlib.contextmanager
def running_agent(state_dir: Path, public_key: Path | None, *, allow_unsigned: bool = False,
                  models: dict[str, ModelOverrides] | None = None, keep_versions: int = 3,
                  repository_control: bool = False, http: bool = False,
                  response_cache_bytes: int = 0, log_control: bool = False,
                  trace: TraceConfig | None = None,
                  max_concurrent_executions: int = 0) -> Iterator[Agent]:
    """An in-process agent (TCP on port 0 and a Unix socket; HTTP on port 0 with ``http``)
    trusting ``public_key``; ``trace``: its [trace] section; ``log_control``: callers may
    change the log and trace settings; ``max_concurrent_executions``: its gate (0: the core
    count)."""
    options = sections("pipeline-agent", *([public_key] if public_key else []), insecure=True,
                       allow_unsigned=allow_unsigned, keep_versions=keep_versions)
    uds = state_dir / "run" / "i.sock"
    config = AgentConfig(state_dir=state_dir,
                         models=ModelsConfig(overrides=models or {},
                                             response_cache_bytes=response_cache_bytes,
                                             max_concurrent_executions=max_concurrent_executions),
                         grpc=GrpcConfig(address="127.0.0.1:0", uds_enabled=True, uds=uds,
                                         workers=24, repository_control=repository_control,
                                         log_control=log_control),
                         http=HttpConfig(listen="127.0.0.1:0" if http else None),
                         trace=trace or TraceConfig())
    with running(config, options, name="pipeline-agent") as agent:
        yield agent
