"""Runtime processes bounded (issue 27): a Python model that grows past its
``memory_limit_mib`` is killed and replaced (the request gets the reason, the next is served),
and the processes a model starts do not outlive its runtime process or the agent."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import psutil
import pytest
from tritonclient.utils import InferenceServerException

from edge_agent.config.models import ModelOverrides
from tests.pipelines.conftest import Built, build, infer_xy, python_spec, running_agent
from tests.support.eventually import eventually

GREEDY = '''
import subprocess
import time

import numpy as np

_held = []


def grow(inputs, ctx):
    """Negative input: touch 64 MiB every 10 ms until stopped (the limit must stop it)."""
    if float(inputs["X"].reshape(-1)[0]) < 0:
        while True:
            _held.append(np.ones(16 << 20, np.float32))
            time.sleep(0.01)
    return {"Y": inputs["X"] * 2}


def spawn(inputs, ctx):
    """Start a long sleeper and answer its pid (a model that leaves a child behind)."""
    child = subprocess.Popen(["sleep", "3600"])
    _held.append(child)
    return {"Y": np.full_like(inputs["X"], float(child.pid))}
'''

GOOD = np.ones((1, 4), np.float32)
BAD = -GOOD


@pytest.fixture(scope="module")
def bundles(built: Built, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    src = tmp_path_factory.mktemp("greedy")
    (src / "greedy.py").write_text(GREEDY)
    return {name: build(python_spec(src, name, f"greedy:{fn}", source="greedy.py"), 1,
                        src / "out", built.private_key)
            for name, fn in (("grow", "grow"), ("spawn", "spawn"))}


def test_a_model_over_its_memory_limit_is_killed_and_replaced(
        built: Built, bundles: dict[str, Path], tmp_path: Path) -> None:
    models = {"grow": ModelOverrides(isolation="process", memory_limit_mib=256)}
    with running_agent(tmp_path / "agent", built.public_key, models=models) as agent:
        assert agent.deploy(bundles["grow"]).ok
        np.testing.assert_array_equal(infer_xy(agent.tcp, "grow", GOOD), GOOD * 2)
        with pytest.raises(InferenceServerException) as err:
            infer_xy(agent.tcp, "grow", BAD)
        message = str(err.value)
        assert "memory_limit_mib" in message and "256 MiB" in message, message
        # the replacement serves the next request
        np.testing.assert_array_equal(infer_xy(agent.tcp, "grow", GOOD), GOOD * 2)


def test_a_child_a_model_started_dies_with_its_runtime_process(
        built: Built, bundles: dict[str, Path], tmp_path: Path) -> None:
    models = {"spawn": ModelOverrides(isolation="process")}
    with running_agent(tmp_path / "agent", built.public_key, models=models) as agent:
        assert agent.deploy(bundles["spawn"]).ok
        child = int(infer_xy(agent.tcp, "spawn", GOOD).reshape(-1)[0])
        assert psutil.pid_exists(child)
        assert psutil.Process(child).ppid() != os.getpid()  # the runtime process's child
    # the agent stopped: the runtime process and what it started are gone

    def gone() -> bool:
        try:
            return psutil.Process(child).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    eventually(gone, timeout=30, interval=0.1, message=f"the model's child {child} outlived "
               "the agent")
