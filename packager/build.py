"""``build_bundles``: one ONNX model in, one signed, parity-checked bundle per device profile out.

All inputs are validated before any work; bundles are staged in a hidden temp dir inside
``out_dir`` and renamed into place only when every profile succeeded, so a failure leaves no
partial bundle behind.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import shutil
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import onnx

from packager import __version__
from packager.artifact import Artifact
from packager.bundle.errors import BundleError, ModelError, ParityError, UsageError
from packager.bundle.format import bundle_filename, check_model_name, sha256_file
from packager.bundle.input_format import check_input_formats
from packager.bundle.manifest import (
    EXTERNAL_DATA_FORMAT,
    FORMAT_VERSION,
    LOAD_COST_KEY,
    BatchingConfig,
    Manifest,
    SequenceConfig,
    TensorSpec,
    input_shapes,
)
from packager.bundle.parity import (
    REFERENCE_FILE,
    GivenInputs,
    Runner,
    check_parity,
    load_given_inputs,
    make_reference,
    onnxruntime_runner,
    openvino_runner,
    save_reference,
)
from packager.bundle.profiles import DeviceProfile
from packager.bundle.signing import load_private_key
from packager.bundle.writer import write_bundle
from packager.calibration import CalibrationData, load_calibration
from packager.converters import convert
from packager.labels import load_labels, write_label_files
from packager.load_cost import measure_load_cost
from packager.onnx_tools import (
    io_signature,
    leading_dim_state,
    load_model,
    make_batch_dynamic,
)
from packager.progress import Steps
from packager.quantize import has_quantizable_ops, held_out_parity, quantize_static_int8
from packager.sequence_parity import check_sequence
from packager.staging import check_replace, load_profiles, open_stage, publish
from packager.trees import TreeModel, check_native, convert_tree_model, has_ml_ops, tree_kind

PARITY_BATCH = 4  # the second batch size of the parity check (when the model is batched)


@dataclasses.dataclass(frozen=True)
class Calibrated:
    """The statically quantized (QDQ) model shared by a build's int8 profiles, the data it was
    calibrated on, and what was done (recorded in the manifest as ``parity.quantization``)."""

    path: Path
    data: CalibrationData
    info: dict[str, Any]


@dataclasses.dataclass
class PreparedModel:
    """The source model after validation and optional batch-dim rewrite."""

    model: onnx.ModelProto
    path: Path
    source_name: str
    source_sha256: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    batched: bool
    tree: TreeModel | None = None  # set when the source was a tree model file
    native_parity: dict[str, Any] | None = None  # the library-vs-ONNX report of a tree model


def check_version(version: object) -> int:
    """Versions are positive integers (Triton-compatible); UsageError otherwise."""
    if isinstance(version, bool):
        raise UsageError(f"version {version!r} must be a positive integer (1, 2, 3, ...)")
    try:
        v = int(str(version).strip()) if isinstance(version, str) else int(version)  # type: ignore[call-overload]  # int() of any object; TypeError is caught
    except (TypeError, ValueError):
        raise UsageError(f"version {version!r} must be a positive integer (1, 2, 3, ...)") from None
    if v < 1 or (isinstance(version, float) and version != v):
        raise UsageError(f"version {version!r} must be a positive integer (1, 2, 3, ...)")
    return v


def _strip_initializer_inputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """Old exports list initializers among graph inputs; drop them (they are not model inputs,
    and tools treat listed initializers as overridable rather than constant)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    inits = {i.name for i in out.graph.initializer}
    keep = [vi for vi in out.graph.input if vi.name not in inits]
    if len(keep) != len(out.graph.input):
        del out.graph.input[:]
        out.graph.input.extend(keep)
        out.ir_version = max(out.ir_version, 4)
    return out


def prepare_model(model_path: Path, stage: Path, dynamic_batch: bool) -> PreparedModel:
    """Validate the model, read its signature, make the batch dynamic when asked; save it."""
    model_path = Path(model_path)
    model = load_model(model_path)
    model = _strip_initializer_inputs(model)
    inputs, outputs = io_signature(model)
    state = leading_dim_state(inputs + outputs)
    if dynamic_batch and state != "dynamic":
        if state != "one":
            raise ModelError(f"{model_path}: --dynamic-batch needs dim 0 of every input and "
                             "output to be 1 or dynamic; it is not")
        model = make_batch_dynamic(model)
        inputs, outputs = io_signature(model)
        state = "dynamic"
    path = stage / "source.onnx"
    onnx.save(model, str(path))
    return PreparedModel(model, path, model_path.name, sha256_file(model_path), inputs, outputs,
                         batched=state == "dynamic")


def _batching(profile: DeviceProfile, batched: bool, max_batch: int | None) -> BatchingConfig:
    b = profile.batching
    if not batched:
        return dataclasses.replace(b, max_batch_size=0, preferred_batch_sizes=(),
                                   max_queue_delay_us=0)
    mb = max_batch if max_batch is not None else b.max_batch_size
    mb = max(mb, 1)
    preferred = tuple(p for p in b.preferred_batch_sizes if p <= mb)
    return dataclasses.replace(b, max_batch_size=mb, preferred_batch_sizes=preferred)


def _tensorrt_options(profile: DeviceProfile, batching: BatchingConfig) -> dict[str, Any]:
    opts = profile.options.get("tensorrt", {})
    max_b = max(batching.max_batch_size, 1)
    opt_b = int(opts.get("opt_batch", max(batching.preferred_batch_sizes, default=1)))
    return {
        "min_batch": 1,
        "opt_batch": min(max(opt_b, 1), max_b),
        "max_batch": max_b,
        "workspace_mb": int(opts.get("workspace_mb", 1024)),
    }


def _runner(art: Artifact, root: Path) -> tuple[Runner | None, str]:
    entry = root / art.entry
    if art.backend == "onnxruntime":
        return onnxruntime_runner(entry), ""
    if art.backend == "openvino":
        return openvino_runner(entry, art.options.get("inference_precision", "f32")), ""
    if art.backend == "tensorrt":
        engines = art.options.get("engines", {})
        if engines:
            from packager.tensorrt_build import engine_runner

            return engine_runner(root / next(iter(engines.values()))), ""
        return None, ("no engine was built here (TensorRT or a GPU is missing); the engine is "
                      "built and checked on the device")
    return None, f"no parity runner for backend {art.backend}"


def _toolchain(backends: set[str]) -> dict[str, str]:
    tc = {"edge-pack": __version__, "python": platform.python_version(),
          "onnx": onnx.__version__}
    dists = {"onnxruntime": "onnxruntime", "openvino": "openvino", "tensorrt": "tensorrt"}
    for backend in sorted(backends | {"onnxruntime"}):
        try:
            tc[backend] = metadata.version(dists[backend])
        except metadata.PackageNotFoundError:
            tc[backend] = "absent"
    return tc


def _created() -> tuple[str, int]:
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    ts = int(epoch) if epoch and epoch.isdigit() else int(time.time())
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), ts


def _write_reference(root: Path, source: Runner, prepared: PreparedModel,
                     batch_sizes: Sequence[int | None],
                     given: GivenInputs | None) -> dict[str, Any]:
    """Store reference inputs and the source model's outputs in the bundle (``reference.npz``,
    hashed in the signed manifest) for the device's own parity check; their summary."""
    arrays, origin = (given if given is not None else (None, "seeded"))
    if any(s.datatype == "BYTES" for s in prepared.inputs):
        return {"omitted": "the model takes BYTES inputs"}
    cases = make_reference(source, prepared.inputs, batch_sizes, arrays)
    if not cases:
        return {"omitted": "one reference case is larger than the size limit"}
    save_reference(root / REFERENCE_FILE, cases, origin)
    return {"file": REFERENCE_FILE, "origin": origin,
            "batch_sizes": [c.rows if c.rows is not None else 1 for c in cases],
            "bytes": (root / REFERENCE_FILE).stat().st_size}


def _plan(prepared: PreparedModel, profile: DeviceProfile,
          static_int8: bool) -> tuple[list[tuple[str, str]], str]:
    """(backend, precision) per artifact, and why ONNX Runtime serves instead of the profile's
    backend ("" when it does not)."""
    ml_ops = has_ml_ops(prepared.model)
    if ml_ops:
        what = f"{prepared.source_name} uses ai.onnx.ml ops ({', '.join(ml_ops)})"
        if profile.precision == "int8" and not has_quantizable_ops(prepared.model):
            raise UsageError(f"{what} and nothing int8 quantization acts on (MatMul, Gemm, "
                             f"Conv): build it for an fp32 profile (e.g. "
                             f"{profile.arch}-cpu-onnxruntime) instead of {profile.name}")
        if profile.backend != "onnxruntime":
            if profile.backend != "openvino" and profile.fallback_backend != "onnxruntime":
                raise UsageError(f"{what}, which {profile.backend} lacks and profile "
                                 f"{profile.name} has no ONNX Runtime fallback")
            # a calibrated int8 profile keeps its int8: the same QDQ model on ONNX Runtime
            precision = "int8" if static_int8 else "fp32"
            return [("onnxruntime", precision)], (
                f"{profile.backend} has no ai.onnx.ml ops ({', '.join(ml_ops)}): ONNX Runtime "
                f"serves it ({precision})")
    plan = [(profile.backend, profile.precision)]
    if profile.fallback_backend:
        # a calibrated int8 profile falls back to the same calibrated model on ONNX Runtime
        plan.append((profile.fallback_backend,
                     "int8" if static_int8 and profile.fallback_backend == "onnxruntime"
                     else "fp32"))
    return plan, ""


def _check_controls(sequence: SequenceConfig | None, prepared: PreparedModel) -> None:
    """UsageError unless every control input is an input of the model with its datatype."""
    if sequence is None:
        return
    given = {t.name: t.datatype for t in prepared.inputs}
    for c in sequence.control_inputs:
        if given.get(c.name) != c.datatype:
            raise UsageError(f"--control-input {c.kind}={c.name}:{c.datatype}: the model has "
                             f"no {c.datatype} input {c.name!r} (its inputs: "
                             f"{', '.join(f'{n} {d}' for n, d in given.items())})")
    answered = {t.name: t.datatype for t in prepared.outputs}
    for t in sequence.states:
        if t.input_name not in given or given[t.input_name] != answered.get(t.output_name):
            raise UsageError(f"--state {t.input_name}:{t.output_name}: the model needs an "
                             f"input {t.input_name!r} and an output {t.output_name!r} of one "
                             f"datatype (inputs: {', '.join(given)}; outputs: "
                             f"{', '.join(answered)})")


def _with_sequence(report: dict[str, Any], sequence: dict[str, Any]) -> None:
    """A stateful model's parity report with its sequence check folded in."""
    report["sequence"] = sequence
    if not sequence["passed"]:
        report["passed"] = False
        report["max_abs_error"] = max(report["max_abs_error"], sequence["max_abs_error"])
        report["max_rel_error"] = max(report["max_rel_error"], sequence["max_rel_error"])
        report["inputs"] = (f"a {sequence['steps']}-request sequence (START to END, each "
                            "runner carrying its own implicit state)")


def _build_one(prepared: PreparedModel, profile: DeviceProfile, *, name: str, version: int,
               max_batch: int | None, allow_parity_failure: bool, stage: Path, key: Any,
               steps: Steps, reference_inputs: GivenInputs | None = None,
               calibrated: Calibrated | None = None,
               response_cache: bool = False,
               labels: Mapping[str, tuple[str, ...]] | None = None,
               input_formats: dict[str, str] | None = None,
               sequence: SequenceConfig | None = None) -> Path:
    root = stage / profile.name
    root.mkdir()
    batching = _batching(profile, prepared.batched, max_batch)
    artifacts: list[Artifact] = []
    static_int8 = calibrated is not None and profile.precision == "int8"
    plan, instead = _plan(prepared, profile, static_int8)
    for backend, precision in plan:
        steps.start(f"{profile.name}: convert to {backend} ({precision})")
        opts = dict(profile.options.get(backend, {}))
        if backend == "tensorrt":
            opts = _tensorrt_options(profile, batching)
        art = convert(backend, precision, prepared.path, prepared.model, root, opts,
                      prepared.source_name,
                      calibrated.path if calibrated is not None and precision == "int8"
                      else None)
        if backend == "openvino":
            art.options["num_streams"] = batching.instances  # streams = instances
        if instead:
            art.options["instead_of"] = profile.backend
            art.options["instead_reason"] = instead
        artifacts.append(art)
        steps.advance(f"{profile.name}: converted to {backend} ({precision})")

    source = onnxruntime_runner(prepared.path)
    batch_sizes: Sequence[int | None]
    if prepared.batched:
        batch_sizes = sorted({1, min(PARITY_BATCH, batching.max_batch_size)})
    else:
        batch_sizes = [None]
    tol = profile.parity
    if static_int8:
        tol = dataclasses.replace(tol, top1_only=True)
    parity: dict[str, Any] = {
        "tolerance": dataclasses.asdict(tol), "artifacts": {}, "skipped": {},
    }
    if static_int8 and calibrated is not None:
        parity["quantization"] = dict(calibrated.info)
    if prepared.native_parity is not None:
        parity["native"] = dict(prepared.native_parity)
    if instead:
        parity["skipped"][profile.backend] = instead
    for i, art in enumerate(artifacts):
        steps.start(f"{profile.name}: parity check of {art.backend}")
        runner, why = _runner(art, root)
        if runner is None:
            parity["skipped"][art.backend] = why
        elif calibrated is not None and art.precision == "int8":
            # real rows the quantizer never saw: seeded noise is outside the calibrated ranges
            parity["artifacts"][art.backend] = held_out_parity(
                source, runner, calibrated.data, prepared.batched, tol)
        else:
            parity["artifacts"][art.backend] = check_parity(source, runner, prepared.inputs,
                                                            batch_sizes, tol)
            if sequence is not None:
                _with_sequence(parity["artifacts"][art.backend], check_sequence(
                    source, runner, prepared.inputs, sequence, prepared.batched, tol))
            if i == 0 and not os.environ.get("SOURCE_DATE_EPOCH"):
                # the served artifact's load cost, for the agent's memory budget (a memory
                # figure differs between runs: reproducible builds leave it out)
                cost = measure_load_cost(art.backend, root / art.entry,
                                         art.options.get("inference_precision", "f32"))
                if cost:
                    parity[LOAD_COST_KEY] = cost
        steps.advance(f"{profile.name}: parity of {art.backend} done")
    parity["passed"] = all(r["passed"] for r in parity["artifacts"].values())
    parity["allowed_failure"] = bool(not parity["passed"] and allow_parity_failure)
    if not parity["passed"] and not allow_parity_failure:
        backend, rep = next((b, r) for b, r in parity["artifacts"].items() if not r["passed"])
        raise ParityError(
            f"profile {profile.name}: {backend} artifact disagrees with the source model: max "
            f"abs error {rep['max_abs_error']:.3g}, max rel error {rep['max_rel_error']:.3g}, "
            f"top-1 agreement {rep['top1_agreement']}"
            + (f" on {rep['inputs']}" if rep.get("inputs") else "")
            + f" (tolerance atol={tol.atol}, rtol={tol.rtol}, min top-1 "
            f"{tol.min_top1_agreement}"
            + (", top-1 only" if tol.top1_only else "")
            + "); pass --allow-parity-failure to build anyway"
            + ("" if calibrated is not None or profile.precision != "int8" else
               ", or --calibration-data for static int8 (checked by top-1 agreement on "
               "real rows)"))

    steps.start(f"{profile.name}: write bundle")
    if reference_inputs is None and static_int8 and calibrated is not None:
        # the device checks the int8 model on real rows too (its tolerance is top-1 only)
        held = calibrated.data.held_out
        reference_inputs = (held if prepared.batched else {k: a[0] for k, a in held.items()},
                            f"held-out rows of {calibrated.data.origin}")
    parity["reference"] = _write_reference(root, source, prepared, batch_sizes,
                                           reference_inputs)
    created, mtime = _created()
    backend_options = {a.backend: dict(a.options) for a in artifacts}
    toolchain = _toolchain({a.backend for a in artifacts})
    if prepared.tree is not None:
        toolchain.update(prepared.tree.toolchain)
    primary = artifacts[0]
    external_data = {a.backend: a.external_data for a in artifacts if a.external_data}
    manifest = Manifest(
        name=name, version=version, profile=profile.name, arch=profile.arch,
        backend=primary.backend, precision=primary.precision,
        inputs=prepared.inputs, outputs=prepared.outputs, batching=batching,
        artifacts={a.backend: a.entry for a in artifacts},
        fallback_backend=profile.fallback_backend if not instead else None,
        backend_options=backend_options,
        source_sha256=prepared.source_sha256, source_name=prepared.source_name,
        parity=parity, toolchain=toolchain, created=created,
        response_cache=response_cache, labels=dict(labels or {}),
        input_formats=input_formats or {}, sequence=sequence,
        external_data=external_data,
        format_version=EXTERNAL_DATA_FORMAT if external_data else FORMAT_VERSION,
    )
    write_label_files(root, manifest.labels)
    out = stage / bundle_filename(name, version, profile.name)
    write_bundle(out, root, manifest, key, mtime)
    steps.advance(f"{profile.name}: bundle written")
    return out


def _checked_formats(formats: Mapping[str, str] | None,
                     prepared: PreparedModel) -> dict[str, str]:
    """``--input-format`` values checked against the model's inputs (UsageError if wrong)."""
    if not formats:
        return {}
    try:
        return check_input_formats(formats, input_shapes(prepared.inputs, prepared.batched))
    except BundleError as exc:
        raise UsageError(f"--input-format: {exc}") from None


def _prepare_any(model_path: Path, stage: Path, dynamic_batch: bool) -> PreparedModel:
    """An ONNX model as is; a tree model file (packager/trees.py) converted to ONNX-ML first."""
    if tree_kind(model_path) is None:
        return prepare_model(model_path, stage, dynamic_batch)
    if not model_path.is_file():
        raise ModelError(f"{model_path}: no such model file")
    converted = stage / "converted.onnx"
    tree = convert_tree_model(model_path, converted)
    prepared = prepare_model(converted, stage, dynamic_batch=False)
    return dataclasses.replace(prepared, source_name=model_path.name,
                               source_sha256=sha256_file(model_path), tree=tree)


def _check_int8_plan(profiles: Sequence[DeviceProfile],
                     calibration_data: Path | str | None) -> None:
    """--calibration-data needs an int8 profile; OpenVINO int8 needs calibration data."""
    int8 = [p.name for p in profiles if p.precision == "int8"]
    if calibration_data is not None and not int8:
        raise UsageError("--calibration-data applies to int8 profiles, and none is given (e.g. "
                         "--profile x86_64-cpu-onnxruntime-int8; see `edge-pack profiles`)")
    no_data = [p.name for p in profiles if p.precision == "int8" and p.backend != "onnxruntime"]
    if calibration_data is None and no_data:
        raise UsageError(f"profile {no_data[0]} quantizes with representative inputs: pass "
                         "--calibration-data FILE.npz|DIR (one array per model input, leading "
                         "dim = samples)")


def build_bundles(
    model_path: Path | str,
    *,
    name: str,
    version: int,
    profiles: Sequence[str],
    out_dir: Path | str,
    key_path: Path | str | None = None,
    dynamic_batch: bool = False,
    max_batch: int | None = None,
    allow_parity_failure: bool = False,
    progress: Any = None,
    reference_data: Path | str | None = None,
    calibration_data: Path | str | None = None,
    response_cache: bool = False,
    overwrite: bool = False,
    labels: Mapping[str, Path | str] | None = None,
    input_formats: Mapping[str, str] | None = None,
    sequence: SequenceConfig | None = None,
) -> list[Path]:
    """Build ``out_dir/NAME-VERSION-PROFILE.edgepkg`` for each profile; return their paths.

    ``reference_data`` is an .npz of real inputs (one array per model input) stored as the
    bundles' reference data instead of seeded inputs.
    ``calibration_data`` (an .npz or a directory of NAME.npy, one array per input, leading dim =
    samples) makes the int8 profiles statically quantized (packager/quantize.py); parity of
    those is top-1 agreement on its held-out rows.
    ``response_cache`` records that the model opts into the agent's response cache by default.
    ``labels`` maps output names ("" for a single-output model's) to label files, one label per
    line (packager/labels.py), answered by the agent's classification extension.
    ``input_formats`` ({input: "NCHW" | "NHWC"}) declares image inputs' layout
    (packager/bundle/input_format.py); a spec declares its own.
    ``sequence`` makes the model stateful (its sequence batcher; its control inputs must be
    inputs of the model).
    ``progress`` is None, a callable ``f(description, done, total)`` or a rich Progress.
    Raises a PackagerError subclass (and writes nothing to ``out_dir``) on any failure, a
    bundle in ``out_dir`` with the same name built from another model included (checked
    before converting, and again before writing) unless ``overwrite``; a rebuild from the
    same model file replaces its bundles.
    A ``.toml`` model path is a model spec (Python model or pipeline): packager/spec_build.py.
    """
    if Path(model_path).suffix == ".toml":
        from packager.spec_build import build_spec_bundles

        if (dynamic_batch or max_batch is not None or allow_parity_failure
                or calibration_data is not None or response_cache or labels or input_formats
                or sequence is not None):
            raise UsageError("--dynamic-batch, --max-batch, --allow-parity-failure, "
                             "--calibration-data, --response-cache, --labels and --input-format "
                             "apply to ONNX models; a spec sets max_batch_size itself (and "
                             "input_formats)")
        return build_spec_bundles(model_path, name=name or None, version=check_version(version),
                                  profiles=profiles, out_dir=out_dir, key_path=key_path,
                                  overwrite=overwrite)
    try:
        check_model_name(name)
    except BundleError as exc:
        raise UsageError(str(exc)) from None
    version = check_version(version)
    if max_batch is not None and (isinstance(max_batch, bool) or not isinstance(max_batch, int)
                                  or max_batch < 1):
        raise UsageError(f"--max-batch {max_batch!r} must be a positive integer")
    loaded = load_profiles(profiles)
    _check_int8_plan(loaded, calibration_data)
    key = load_private_key(Path(key_path)) if key_path is not None else None
    if Path(model_path).is_file():  # refused now rather than after the conversions
        source = (Path(model_path).name, sha256_file(Path(model_path)), ())
        for p in loaded:
            check_replace(Path(out_dir) / bundle_filename(name, version, p.name), source,
                          overwrite=overwrite)
    out, stage = open_stage(out_dir)
    per_profile = [1 + (1 if p.fallback_backend else 0) for p in loaded]
    steps = Steps(progress, total=1 + (calibration_data is not None)
                  + sum(2 * n + 1 for n in per_profile))
    try:
        steps.start(f"validate {Path(model_path).name}")
        prepared = _prepare_any(Path(model_path), stage, dynamic_batch)
        formats = _checked_formats(input_formats, prepared)
        _check_controls(sequence, prepared)
        reference_inputs: GivenInputs | None = None
        if reference_data is not None:
            reference_inputs = (load_given_inputs(Path(reference_data), prepared.inputs,
                                                  prepared.batched), Path(reference_data).name)
        if prepared.tree is not None:
            prepared.native_parity = check_native(
                prepared.tree, prepared.path, Path(model_path),
                allow_parity_failure=allow_parity_failure,
                given_rows=reference_inputs[0][prepared.inputs[0].name]
                if reference_inputs is not None else None)
        label_lists = load_labels({k: Path(v) for k, v in (labels or {}).items()},
                                  prepared.outputs, prepared.batched)
        calibrated: Calibrated | None = None
        if calibration_data is not None:
            data = load_calibration(Path(calibration_data), prepared.inputs, prepared.batched)
        steps.advance(f"validated {Path(model_path).name}")
        if calibration_data is not None:
            steps.start(f"calibrate int8 on {data.sizes[0]} samples of {data.origin}")
            qdq = stage / "calibrated.onnx"
            info = quantize_static_int8(prepared.model, qdq, data, prepared.batched,
                                        stage / ".calibrate")
            calibrated = Calibrated(qdq, data, info)
            steps.advance("calibrated")
        built = [
            _build_one(prepared, p, name=name, version=version, max_batch=max_batch,
                       allow_parity_failure=allow_parity_failure, stage=stage, key=key,
                       steps=steps, reference_inputs=reference_inputs, calibrated=calibrated,
                       response_cache=response_cache, labels=label_lists, input_formats=formats,
                       sequence=sequence)
            for p in loaded
        ]
        return publish(built, out, overwrite=overwrite)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
