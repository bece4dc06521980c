"""The two PyTriton examples migrated to edge_agent.inline (examples/pytriton/), run as
scripts and called with the unmodified tritonclient; stopped by SIGTERM; and the linear one
built with ``edge-pack build MODULE:FUNCTION``, deployed to a real agent, answering as the
bound function does."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from packager.bundle.signing import generate_keypair
from tests.support.eventually import eventually
from tests.support.harness import trusted_agent

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "pytriton"


class Example:
    """An example script serving on 127.0.0.1 port 0 (gRPC and HTTP) in its own process."""

    def __init__(self, script: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [sys.executable, str(EXAMPLES / script), "--address", "127.0.0.1:0",
             "--http", "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, env=env, start_new_session=True)
        self.lines: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()
        line = eventually(lambda: next((x for x in self.lines if x.startswith("serving on")),
                                       None) if self.proc.poll() is None else "exited",
                          timeout=120, message=f"{script} serving")
        assert line != "exited", "".join(self.lines)
        words = line.split()
        self.grpc, self.http = words[2], words[-1]

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            raise


@pytest.fixture()
def linear() -> Iterator[Example]:
    example = Example("linear.py")
    try:
        yield example
    finally:
        example.stop()


def _linear_expected(x: np.ndarray) -> np.ndarray:
    weights = np.array([[0.5, -1.0], [2.0, 0.25], [-0.75, 1.5]], dtype=np.float32)
    return x @ weights + np.array([0.1, -0.2], dtype=np.float32)


def _infer(module: object, url: str, model: str, name: str, array: np.ndarray,
           datatype: str) -> object:
    client = module.InferenceServerClient(url)  # type: ignore[attr-defined]
    item = module.InferInput(name, list(array.shape), datatype)  # type: ignore[attr-defined]
    item.set_data_from_numpy(array)
    try:
        return client.infer(model, [item])
    finally:
        client.close()


def test_linear_example_with_tritonclient(linear: Example) -> None:
    x = np.random.default_rng(3).standard_normal((5, 3)).astype(np.float32)
    for module, url in ((grpcclient, linear.grpc), (httpclient, linear.http)):
        y = _infer(module, url, "linear", "x", x, "FP32").as_numpy("y")  # type: ignore[attr-defined]
        np.testing.assert_allclose(y, _linear_expected(x), rtol=1e-6)
    assert linear.stop() == 0  # SIGTERM: a clean stop


def test_text_classifier_example_with_tritonclient() -> None:
    example = Example("text_classifier.py")
    try:
        text = np.array([[b"I love this, great!"], [b"awful and slow"], [b"a chair"]],
                        dtype=object)
        for module, url in ((grpcclient, example.grpc), (httpclient, example.http)):
            result = _infer(module, url, "text_classifier", "text", text, "BYTES")
            labels = result.as_numpy("label").reshape(-1).tolist()  # type: ignore[attr-defined]
            assert labels == [b"positive", b"negative", b"neutral"]
            scores = result.as_numpy("score").reshape(-1)  # type: ignore[attr-defined]
            assert scores[0] > 0 > scores[1] and scores[2] == 0
    finally:
        assert example.stop() == 0


def test_bound_function_and_its_bundle_answer_identically(linear: Example,
                                                          tmp_path: Path) -> None:
    private, public = generate_keypair(tmp_path / "keys")
    out = tmp_path / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "packager.cli", "build", f"{EXAMPLES / 'linear.py'}:infer",
         "--name", "linear", "--version", "1", "--profile", "x86_64-cpu-onnxruntime",
         "--key", str(private), "--out", str(out), "--requires", "numpy"],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=tmp_path, timeout=300)
    assert built.returncode == 0, built.stderr
    bundle = Path(built.stdout.split()[-1])
    assert bundle.name == "linear-1-x86_64-cpu-onnxruntime.edgepkg"
    x = np.random.default_rng(7).standard_normal((6, 3)).astype(np.float32)
    inline = _infer(grpcclient, linear.grpc, "linear", "x", x, "FP32")
    with trusted_agent(tmp_path / "state", public, deploy=bundle) as agent:
        deployed = _infer(grpcclient, agent.tcp, "linear", "x", x, "FP32")
        meta = grpcclient.InferenceServerClient(agent.tcp).get_model_metadata(
            "linear", as_json=True)
    np.testing.assert_array_equal(deployed.as_numpy("y"),  # type: ignore[attr-defined]
                                  inline.as_numpy("y"))  # type: ignore[attr-defined]
    assert [(t["name"], t["datatype"], t["shape"]) for t in meta["inputs"]] == \
        [("x", "FP32", ["-1", "3"])]
