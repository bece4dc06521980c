"""Write extracted model directories (``models/NAME/VERSION/``) for serving-core tests.

Artifacts are real conversions: the ONNX file as is for ONNX Runtime and an OpenVINO IR made
with ``openvino.convert_model`` + ``save_model``. The manifest lists every file's sha256 so the
repository's hash check runs for real.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np
import onnx

from packager.manifest import BatchingConfig, FileEntry, Manifest, TensorSpec

_ONNX_TO_KSERVE = {1: "FP32", 7: "INT64", 6: "INT32", 10: "FP16", 11: "FP64", 9: "BOOL",
                   2: "UINT8", 3: "INT8"}


def onnx_signature(path: Path) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
    """Real inputs (initializers excluded) and outputs of an ONNX model; symbolic dims -> -1."""
    model = onnx.load(str(path), load_external_data=False)
    inits = {i.name for i in model.graph.initializer}

    def spec(vi: onnx.ValueInfoProto) -> TensorSpec:
        tt = vi.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim)
        return TensorSpec(vi.name, _ONNX_TO_KSERVE[tt.elem_type], dims)

    return (tuple(spec(v) for v in model.graph.input if v.name not in inits),
            tuple(spec(v) for v in model.graph.output))


def make_batch_dynamic_file(src: Path, dst: Path) -> Path:
    """Copy of ``src`` whose leading batch dim is symbolic (for the light CNNs)."""
    from packager.onnx_tools import make_batch_dynamic

    onnx.save(make_batch_dynamic(onnx.load(str(src))), str(dst))
    return dst


def convert_openvino(onnx_path: Path, out_dir: Path) -> Path:
    """Convert ``onnx_path`` to OpenVINO IR ``out_dir/model.xml`` (+ .bin)."""
    import openvino as ov

    out_dir.mkdir(parents=True, exist_ok=True)
    xml = out_dir / "model.xml"
    ov.save_model(ov.convert_model(str(onnx_path)), str(xml))
    return xml


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class ModelSource:
    """A source ONNX model converted once, installable as many versions/backends as needed."""

    def __init__(self, onnx_path: Path, work_dir: Path) -> None:
        self.onnx_path = Path(onnx_path)
        self.work_dir = Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.inputs, self.outputs = onnx_signature(self.onnx_path)
        self._ov_dir: Path | None = None

    def ov_dir(self) -> Path:
        if self._ov_dir is None:
            self._ov_dir = self.work_dir / "openvino"
            convert_openvino(self.onnx_path, self._ov_dir)
        return self._ov_dir

    def install(self, state_dir: Path, name: str, version: int, *, backend: str = "onnxruntime",
                fallback_backend: str | None = None, batching: BatchingConfig | None = None,
                artifacts: tuple[str, ...] = ("onnxruntime", "openvino"),
                inputs: tuple[TensorSpec, ...] | None = None) -> Path:
        """Write ``state_dir/models/name/version/`` with artifacts and a hashed manifest."""
        target = Path(state_dir) / "models" / name / str(version)
        target.mkdir(parents=True, exist_ok=True)
        entries: dict[str, str] = {}
        if "onnxruntime" in artifacts:
            d = target / "artifacts" / "onnxruntime"
            d.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self.onnx_path, d / "model.onnx")
            entries["onnxruntime"] = "artifacts/onnxruntime/model.onnx"
        if "openvino" in artifacts:
            d = target / "artifacts" / "openvino"
            d.mkdir(parents=True, exist_ok=True)
            for f in self.ov_dir().iterdir():
                shutil.copyfile(f, d / f.name)
            entries["openvino"] = "artifacts/openvino/model.xml"
        files = tuple(
            FileEntry(p.relative_to(target).as_posix(), p.stat().st_size, _sha256(p))
            for p in sorted((target / "artifacts").rglob("*")) if p.is_file())
        manifest = Manifest(
            name=name, version=version, profile="test", arch="x86_64", backend=backend,
            precision="fp32", inputs=inputs or self.inputs, outputs=self.outputs,
            batching=batching or BatchingConfig(max_batch_size=8), artifacts=entries,
            files=files, fallback_backend=fallback_backend, source_sha256=_sha256(self.onnx_path),
            source_name=self.onnx_path.name)
        (target / "manifest.json").write_bytes(manifest.canonical_bytes())
        return target


def reference_outputs(onnx_path: Path, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Outputs of the source model run in-process by ONNX Runtime (the parity reference)."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, inputs), strict=True))
