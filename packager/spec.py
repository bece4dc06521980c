"""Model specs: the TOML files ``edge-pack build SPEC.toml`` takes instead of an ONNX model.

Two kinds (docs/bundle-format.md, "Model specs"): ``kind = "python"`` (a Python function over
numpy arrays, its source files shipped in the bundle) and ``kind = "pipeline"`` (an ensemble:
steps naming other models on the agent, tensors wired by name). Everything is checked here,
before anything is written; each problem is one :class:`UsageError` line naming the key.
"""

from __future__ import annotations

import re
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packager.bundle.errors import BundleError, ModelError, UsageError
from packager.bundle.format import check_member_path, check_model_name
from packager.bundle.function_signature import CALLING_CONTEXT, CALLING_REQUESTS
from packager.bundle.input_format import check_input_formats
from packager.bundle.manifest import (
    DATATYPES,
    PYTHON_SEQUENCE_CONTROLS,
    ControlInput,
    SequenceConfig,
    TensorSpec,
)
from packager.bundle.pipeline import CONDITION_OPS, Step, StepCondition, step_order
from packager.labels import load_labels

KINDS = ("python", "pipeline")
_COMMON_KEYS = {"name", "kind", "max_batch_size", "inputs", "outputs", "description",
                "instances", "input_formats", "labels"}
_PYTHON_KEYS = _COMMON_KEYS | {"source", "entry", "requires", "decoupled", "warmup",
                               "sequence", "calling"}
CALLINGS = (CALLING_CONTEXT, CALLING_REQUESTS)
_SEQUENCE_KEYS = {"strategy", "max_sequence_idle_us", "max_candidate_sequences"}
_PIPELINE_KEYS = _COMMON_KEYS | {"steps"}
_TENSOR_KEYS = {"name", "datatype", "shape"}
_STEP_KEYS = {"model", "version", "inputs", "outputs", "when"}
_WHEN_KEYS = {"tensor", "op", "value"}
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DIST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
MAX_BATCH_LIMIT = 1 << 16
_RESERVED_MODULES = frozenset({"edge_agent", "packager", "console", "numpy", "grpc",
                               "onnxruntime", "openvino", "tensorrt"})


@dataclass(frozen=True)
class ModelSpec:
    """A parsed, checked spec. Tensor shapes exclude the batch dim (as written in the spec)."""

    path: Path
    name: str
    kind: str
    max_batch_size: int
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    sources: tuple[Path, ...] = ()
    entry: str = ""
    requires: tuple[str, ...] = ()
    calling: str = CALLING_CONTEXT
    decoupled: bool = False
    warmup: bool = False
    instances: int = 0
    steps: tuple[Step, ...] = ()
    input_formats: dict[str, str] = field(default_factory=dict)
    labels: dict[str, tuple[str, ...]] = field(default_factory=dict)
    sequence: SequenceConfig | None = None

    def manifest_tensors(self, specs: tuple[TensorSpec, ...]) -> tuple[TensorSpec, ...]:
        """The manifest form: a leading -1 batch dim when ``max_batch_size > 0``."""
        return self.manifest_tensors_of(specs, self.max_batch_size > 0)

    @staticmethod
    def manifest_tensors_of(specs: tuple[TensorSpec, ...],
                            batched: bool) -> tuple[TensorSpec, ...]:
        """``specs`` with a leading -1 batch dim when ``batched``."""
        if not batched:
            return specs
        return tuple(TensorSpec(t.name, t.datatype, (-1, *t.shape)) for t in specs)


def _fail(spec: Path, msg: str) -> UsageError:
    return UsageError(f"{spec}: {msg}")


def _int(spec: Path, key: str, value: Any, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise _fail(spec, f"{key} = {value!r} must be an integer from {lo} to {hi}")
    return value


def _tensors(spec: Path, key: str, value: Any) -> tuple[TensorSpec, ...]:
    if not isinstance(value, list) or not value:
        raise _fail(spec, f"[[{key}]] must list at least one tensor (name, datatype, shape)")
    out: list[TensorSpec] = []
    for i, t in enumerate(value):
        where = f"{key}[{i}]"
        if not isinstance(t, dict):
            raise _fail(spec, f"{where} must be a table with name, datatype and shape")
        unknown = sorted(set(t) - _TENSOR_KEYS)
        if unknown:
            raise _fail(spec, f"{where} has unknown key(s) {unknown}; allowed: "
                              f"{sorted(_TENSOR_KEYS)}")
        name, dt, shape = t.get("name"), t.get("datatype"), t.get("shape")
        if not isinstance(name, str) or not name or len(name) > 256 \
                or not name.isprintable():
            raise _fail(spec, f"{where}.name must be a non-empty string")
        if dt not in DATATYPES:
            raise _fail(spec, f"{where} ({name}): datatype {dt!r} is not one of "
                              f"{', '.join(DATATYPES)}")
        if not isinstance(shape, list) or any(
                isinstance(d, bool) or not isinstance(d, int) or d < -1 or d == 0
                or d > 1 << 31 for d in shape) or len(shape) > 8:
            raise _fail(spec, f"{where} ({name}): shape {shape!r} must be a list of at most 8 "
                              "positive integers or -1 (dynamic), without the batch dim")
        if name in {x.name for x in out}:
            raise _fail(spec, f"{key} names tensor {name!r} twice")
        out.append(TensorSpec(name, str(dt), tuple(shape)))
    return tuple(out)


def _inside(spec: Path, rel: Any) -> Path:
    if not isinstance(rel, str) or not rel:
        raise _fail(spec, f"source entry {rel!r} must be a path relative to the spec")
    p = Path(rel)
    if p.is_absolute() or ".." in p.parts:
        raise _fail(spec, f"source {rel!r} escapes the spec's directory; give paths inside "
                          f"{spec.parent}")
    full = spec.parent / p
    if full.is_symlink() or not full.is_file():
        raise _fail(spec, f"source {rel!r} is not a regular file in {spec.parent}")
    if full.suffix != ".py":
        raise _fail(spec, f"source {rel!r} is not a .py file")
    try:
        check_member_path(f"code/{p.as_posix()}")
    except BundleError:
        raise _fail(spec, f"source {rel!r}: bundle paths are letters, digits and _ . + = - "
                          "separated by /; rename the file") from None
    return p


def _python(spec: Path, d: dict[str, Any]) -> dict[str, Any]:
    src = d.get("source")
    if isinstance(src, str):
        src = [src]
    if not isinstance(src, list) or not src:
        raise _fail(spec, "source must list the .py files of the model (relative to the spec)")
    sources = tuple(_inside(spec, s) for s in src)
    if len(set(sources)) != len(sources):
        raise _fail(spec, f"source lists a file twice: {src}")
    entry = d.get("entry")
    if not isinstance(entry, str) or entry.count(":") != 1:
        raise _fail(spec, f"entry = {entry!r} must be 'module:function', e.g. 'prep:decode'")
    module, func = entry.split(":")
    if not all(_IDENT.match(x) for x in (*module.split("."), func)):
        raise _fail(spec, f"entry = {entry!r}: module and function must be Python identifiers")
    top = module.split(".")[0]
    if top in sys.stdlib_module_names or top in _RESERVED_MODULES:
        raise _fail(spec, f"entry module {module!r} has the name of a standard or agent "
                          f"module ({top!r}); rename it")
    module_file = Path(*module.split(".")).with_suffix(".py")
    if module_file not in sources:
        raise _fail(spec, f"entry module {module!r} is not among the sources "
                          f"({', '.join(s.as_posix() for s in sources)}); add "
                          f"{module_file.as_posix()} to source")
    requires = d.get("requires", [])
    if not isinstance(requires, list) or not all(
            isinstance(r, str) and _DIST.match(r) for r in requires):
        raise _fail(spec, f"requires = {requires!r} must list distribution names, e.g. "
                          "['pillow']")
    flags: dict[str, bool] = {}
    for key in ("decoupled", "warmup"):
        value = d.get(key, False)
        if not isinstance(value, bool):
            raise _fail(spec, f"{key} = {value!r} must be true or false")
        flags[key] = value
    if flags["decoupled"] and flags["warmup"]:
        raise _fail(spec, "decoupled = true cannot be warmed up (its responses stream over "
                          "ModelStreamInfer); set warmup = false")
    calling = d.get("calling", CALLING_CONTEXT)
    if calling not in CALLINGS:
        raise _fail(spec, f"calling = {calling!r} must be \"context\" (fn(inputs, ctx)) or "
                          "\"requests\" (PyTriton's: a list of requests)")
    return {"sources": sources, "entry": entry, "requires": tuple(requires),
            "decoupled": flags["decoupled"], "warmup": flags["warmup"], "calling": calling}


def _sequence(spec: Path, value: Any, mbs: int, instances: int,
              inputs: tuple[TensorSpec, ...]) -> SequenceConfig:
    """A stateful Python model's ``[sequence]`` table (its control inputs are added)."""
    if not isinstance(value, dict) or set(value) - _SEQUENCE_KEYS:
        raise _fail(spec, f"[sequence] must be a table of {sorted(_SEQUENCE_KEYS)}, e.g. "
                          "sequence = { strategy = \"oldest\" }")
    if mbs or instances > 1:
        raise _fail(spec, "a stateful model (sequence) is served with max_batch_size = 0 and "
                          "one instance: its ctx.state lives in the one instance that runs "
                          "each request of the sequence")
    taken = {name for _, name, _ in PYTHON_SEQUENCE_CONTROLS} & {t.name for t in inputs}
    if taken:
        raise _fail(spec, f"inputs {sorted(taken)} are the names of the control inputs the "
                          "agent adds to a stateful model; rename them")
    defaults = SequenceConfig()
    idle, slots = (_int(spec, f"sequence.{key}", value.get(key, getattr(defaults, key)), 1,
                        2**40) for key in ("max_sequence_idle_us", "max_candidate_sequences"))
    try:
        return SequenceConfig(str(value.get("strategy", "oldest")), max_sequence_idle_us=idle,
                              max_candidate_sequences=slots, control_inputs=tuple(
                                  ControlInput(*c) for c in PYTHON_SEQUENCE_CONTROLS))
    except BundleError as exc:
        raise _fail(spec, str(exc)) from None


def _names(spec: Path, where: str, value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or not value or not all(
            isinstance(k, str) and isinstance(v, str) and k and v for k, v in value.items()):
        raise _fail(spec, f"{where} must be a table of tensor names, e.g. {{ X = \"pixels\" }}")
    return dict(value)


def _condition(spec: Path, where: str, value: Any) -> StepCondition | None:
    if value is None:
        return None
    example = '{ tensor = "score", op = ">", value = 0.5 }'
    if not isinstance(value, dict) or set(value) != _WHEN_KEYS:
        raise _fail(spec, f"{where} must be a table with exactly tensor, op and value, e.g. "
                          f"{example}")
    tensor, op, number = value["tensor"], value["op"], value["value"]
    if not isinstance(tensor, str) or not tensor:
        raise _fail(spec, f"{where}.tensor must name a pipeline tensor")
    if op not in CONDITION_OPS:
        raise _fail(spec, f"{where}.op = {op!r} is not one of {list(CONDITION_OPS)}")
    if not isinstance(number, (int, float)):
        raise _fail(spec, f"{where}.value = {number!r} must be a number or a boolean")
    return StepCondition(tensor, op, number)


def _pipeline(spec: Path, d: dict[str, Any], inputs: tuple[TensorSpec, ...],
              outputs: tuple[TensorSpec, ...], name: str, max_batch: int) -> tuple[Step, ...]:
    raw = d.get("steps")
    if not isinstance(raw, list) or not raw:
        raise _fail(spec, "a pipeline needs at least one [[steps]] table")
    known = {t.name for t in inputs}
    steps: list[Step] = []
    for i, s in enumerate(raw):
        where = f"steps[{i}]"
        if not isinstance(s, dict):
            raise _fail(spec, f"{where} must be a table with model, inputs and outputs")
        unknown = sorted(set(s) - _STEP_KEYS)
        if unknown:
            raise _fail(spec, f"{where} has unknown key(s) {unknown}; allowed: "
                              f"{sorted(_STEP_KEYS)}")
        model = s.get("model")
        try:
            check_model_name(model if isinstance(model, str) else "")
        except BundleError:
            raise _fail(spec, f"{where}.model = {model!r} is not a model name") from None
        if model == name:
            raise _fail(spec, f"{where} names the pipeline itself ({name!r}): a cycle")
        version = s.get("version")
        if version is not None:
            version = _int(spec, f"{where}.version", version, 1, 2**31)
        ins = _names(spec, f"{where}.inputs", s.get("inputs"))
        outs = _names(spec, f"{where}.outputs", s.get("outputs"))
        when = _condition(spec, f"{where}.when", s.get("when"))
        if when is not None and max_batch > 0:
            raise _fail(spec, f"{where}.when: a condition decides for a whole execution, and "
                              "batched rows of different requests would decide for each "
                              "other; set max_batch_size = 0")
        for v in outs.values():
            if v in known:
                raise _fail(spec, f"{where} ({model}) writes tensor {v!r}, which already "
                                  "exists; each pipeline tensor is written once")
            known.add(v)
        steps.append(Step(str(model), version, ins, outs, when))
    for i, step in enumerate(steps):
        missing = sorted(v for v in step.reads if v not in known)
        if missing:
            raise _fail(spec, f"steps[{i}] ({step.model}) reads {missing}, which no pipeline "
                              "input or step produces")
    try:
        step_order(steps, lambda i: f"steps[{i}] ({steps[i].model})")
    except ModelError as exc:
        raise _fail(spec, str(exc)) from None
    unproduced = sorted(t.name for t in outputs if t.name not in known)
    if unproduced:
        raise _fail(spec, f"pipeline output(s) {unproduced} are produced by no step")
    return tuple(steps)


def load_spec(path: Path | str, name: str | None = None) -> ModelSpec:
    """Parse and check the spec at ``path``; ``name`` (from --name) must repeat the spec's."""
    spec = Path(path)
    try:
        data = tomllib.loads(spec.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{spec}: no such spec file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{spec}: cannot read the spec: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{spec}: not valid TOML: {exc}") from None
    kind = data.get("kind")
    if kind not in KINDS:
        raise _fail(spec, f"kind = {kind!r} must be one of {', '.join(repr(k) for k in KINDS)}")
    allowed = _PYTHON_KEYS if kind == "python" else _PIPELINE_KEYS
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise _fail(spec, f"unknown key(s) {unknown} for kind {kind!r}; allowed: "
                          f"{sorted(allowed)}")
    model = data.get("name")
    try:
        check_model_name(model if isinstance(model, str) else "")
    except BundleError:
        raise _fail(spec, f"name = {model!r} must be a model name (letters, digits, _ . -)") \
            from None
    if name is not None and name != model:
        raise _fail(spec, f"--name {name!r} differs from the spec's name {model!r}; drop "
                          "--name or make them equal")
    mbs = _int(spec, "max_batch_size", data.get("max_batch_size", 0), 0, MAX_BATCH_LIMIT)
    inputs = _tensors(spec, "inputs", data.get("inputs"))
    outputs = _tensors(spec, "outputs", data.get("outputs"))
    instances = _int(spec, "instances", data.get("instances", 0), 0, 64)
    try:
        formats = check_input_formats(data.get("input_formats", {}),
                                      {t.name: t.shape for t in inputs})
    except BundleError as exc:
        raise _fail(spec, f"input_formats: {exc}") from None
    labels = _labels(spec, data.get("labels", {}), outputs, mbs > 0)
    if kind == "python":
        extra = _python(spec, data)
        if "sequence" in data:
            extra["sequence"] = _sequence(spec, data["sequence"], mbs, instances, inputs)
            inputs += tuple(TensorSpec(name, datatype, (1,))
                            for _, name, datatype in PYTHON_SEQUENCE_CONTROLS)
        return ModelSpec(spec, str(model), kind, mbs, inputs, outputs, instances=instances,
                         input_formats=formats, labels=labels, **extra)
    steps = _pipeline(spec, data, inputs, outputs, str(model), mbs)
    return ModelSpec(spec, str(model), kind, mbs, inputs, outputs, instances=instances,
                     steps=steps, input_formats=formats, labels=labels)


def _labels(spec: Path, value: Any, outputs: tuple[TensorSpec, ...],
            batched: bool) -> dict[str, tuple[str, ...]]:
    """``labels = { OUTPUT = "FILE" }``: each output's class labels, one per line of FILE
    (relative to the spec's directory), checked as ``edge-pack build --labels`` checks them."""
    if not isinstance(value, dict) or not all(
            isinstance(k, str) and k and isinstance(v, str) for k, v in value.items()):
        raise _fail(spec, "labels must be a table of output name -> label file, e.g. "
                          'labels = { SCORES = "labels.txt" }')
    try:
        return load_labels({k: spec.parent / v for k, v in value.items()},
                           ModelSpec.manifest_tensors_of(outputs, batched), batched)
    except UsageError as exc:
        raise _fail(spec, f"labels: {exc}") from None
