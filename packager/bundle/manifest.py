"""The bundle manifest: plain dataclasses and their canonical JSON form.

This module is the contract between the packager (which writes manifests), the agent and the
console (which read them). See docs/bundle-format.md for the normative description.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from packager.bundle.errors import BundleError

FORMAT_VERSION = 1
EXTERNAL_DATA_FORMAT = 2
"""The format version of a bundle whose ONNX artifact keeps its weights in a data file beside
the graph (``external_data``): a reader that knows only version 1 refuses it by its version
rather than loading a graph without knowing about the file it needs."""
FORMAT_VERSIONS = (FORMAT_VERSION, EXTERNAL_DATA_FORMAT)
MANIFEST_NAME = "manifest.json"
SIGNATURE_NAME = "manifest.sig"

# KServe v2 datatype names; the manifest stores these, never numpy names.
DATATYPES = (
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
    "FP16", "FP32", "FP64", "BYTES",
)


@dataclass(frozen=True)
class TensorSpec:
    """One model input or output. ``shape`` includes the batch dimension; -1 marks a dynamic dim."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TensorSpec:
        return cls(name=str(d["name"]), datatype=str(d["datatype"]),
                   shape=tuple(int(x) for x in d["shape"]))


@dataclass(frozen=True)
class BatchingConfig:
    """How the agent batches requests for this model (Triton's dynamic batcher fields).

    ``max_batch_size == 0`` means the model has no batch dimension and is served unbatched;
    otherwise dim 0 of every input and output is the batch dimension.
    """

    max_batch_size: int = 0
    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_delay_us: int = 0
    instances: int = 1
    threads: int = 0  # 0: let the runtime decide
    max_queue_size: int = 0  # 0: the agent's default bound
    default_timeout_us: int = 0  # 0: no queue timeout
    allow_timeout_override: bool = True

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BatchingConfig:
        kw = dict(d)
        kw["preferred_batch_sizes"] = tuple(int(x) for x in kw.get("preferred_batch_sizes", ()))
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in kw.items() if k in known})


CONTROL_KINDS = {"START": ("INT32", "FP32", "BOOL"), "END": ("INT32", "FP32", "BOOL"),
                 "READY": ("INT32", "FP32", "BOOL"),
                 "CORRID": ("UINT64", "INT64", "UINT32", "INT32", "BYTES")}
"""Control input kinds (Triton's ``CONTROL_SEQUENCE_<KIND>``) and the datatypes each may have."""

SEQUENCE_STRATEGIES = ("direct", "oldest")
_KINDS_TEXT = ", ".join(f"{k} {'/'.join(v)}" for k, v in CONTROL_KINDS.items())


PYTHON_SEQUENCE_CONTROLS = (("START", "_SEQUENCE_START", "INT32"),
                            ("END", "_SEQUENCE_END", "INT32"),
                            ("CORRID", "_SEQUENCE_ID", "BYTES"))
"""The control inputs (kind, name, datatype, shape [1]) a stateful Python model's spec gets:
the agent fills them, the Python backend turns them into ``ctx.sequence_*``."""


@dataclass(frozen=True)
class ControlInput:
    """A model input the agent fills for each request of a sequence (Triton's control_input):
    START/END/READY 1 or 0 (true/false), CORRID the sequence's id."""

    kind: str
    name: str
    datatype: str

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ControlInput:
        return cls(kind=str(d["kind"]), name=str(d["name"]), datatype=str(d["datatype"]))


@dataclass(frozen=True)
class StateSpec:
    """Implicit state (Triton's ``sequence_batching.state``): the agent feeds input
    ``input_name`` with what output ``output_name`` answered to the sequence's request before
    (zeros at START) and keeps both out of what callers send and get."""

    input_name: str
    output_name: str

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StateSpec:
        return cls(input_name=str(d["input_name"]), output_name=str(d["output_name"]))


@dataclass(frozen=True)
class SequenceConfig:
    """A stateful model's sequence batcher (Triton's ``sequence_batching``): every request of
    one sequence goes to one slot, in arrival order."""

    strategy: str = "direct"
    max_sequence_idle_us: int = 1_000_000
    max_candidate_sequences: int = 64
    control_inputs: tuple[ControlInput, ...] = ()
    states: tuple[StateSpec, ...] = ()

    def __post_init__(self) -> None:
        if self.strategy not in SEQUENCE_STRATEGIES:
            raise BundleError(f"sequence strategy {self.strategy!r} is not one of "
                              f"{', '.join(SEQUENCE_STRATEGIES)}")
        if self.max_sequence_idle_us < 1 or self.max_candidate_sequences < 1:
            raise BundleError("sequence max_sequence_idle_us and max_candidate_sequences must "
                              "be >= 1")
        names = [c.name for c in self.control_inputs] + [t.input_name for t in self.states]
        if len(set(names)) != len(names):
            raise BundleError(f"sequence control and state inputs name one input twice: "
                              f"{names}")
        for c in self.control_inputs:
            if c.datatype not in CONTROL_KINDS.get(c.kind, ()):
                raise BundleError(
                    f"sequence control input {c.name!r}: kind {c.kind!r} with datatype "
                    f"{c.datatype!r} is not served (kinds and datatypes: "
                    f"{_KINDS_TEXT})")

    def control(self, kind: str) -> ControlInput | None:
        """The control input of ``kind``, if the model has one."""
        return next((c for c in self.control_inputs if c.kind == kind), None)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SequenceConfig:
        if not isinstance(d, dict):
            raise BundleError("manifest key 'sequence' must be an object")
        return cls(strategy=str(d.get("strategy", "direct")),
                   max_sequence_idle_us=int(d.get("max_sequence_idle_us", 1_000_000)),
                   max_candidate_sequences=int(d.get("max_candidate_sequences", 64)),
                   control_inputs=tuple(ControlInput.from_dict(c)
                                        for c in d.get("control_inputs", ())),
                   states=tuple(StateSpec.from_dict(t) for t in d.get("states", ())))

    def hidden(self) -> tuple[set[str], set[str]]:
        """The inputs and outputs the agent fills and takes: not a caller's."""
        return ({c.name for c in self.control_inputs} | {t.input_name for t in self.states},
                {t.output_name for t in self.states})


@dataclass(frozen=True)
class FileEntry:
    """One file of the bundle besides the manifest and signature (path is POSIX, relative)."""

    path: str
    size: int
    sha256: str


LOAD_COST_KEY = "load_rss_bytes"
"""The ``parity`` entry holding the build machine's measured load cost (bytes)."""


def _flag(value: Any, key: str) -> bool:
    if not isinstance(value, bool):
        raise BundleError(f"manifest key {key!r} must be true or false, not {value!r}")
    return value


def _labels(value: Any) -> dict[str, tuple[str, ...]]:
    if not isinstance(value, dict) or not all(
            isinstance(v, list) and all(isinstance(x, str) for x in v) for v in value.values()):
        raise BundleError("manifest key 'labels' must map output names to lists of strings")
    return {str(k): tuple(v) for k, v in value.items()}


def label_file(output: str) -> str:
    """The bundle file holding output ``output``'s labels (what ModelConfig reports as its
    ``label_filename``)."""
    return f"labels/{output}.txt"


LEGACY_FLAGS = {"warmup": True, "decoupled": False}
"""Manifest fields that bundles written before them carried in ``backend_options[backend]``
(their defaults there): still read from there when the field is absent."""


def _legacy_flag(options: Any, backend: str, key: str, default: bool) -> bool:
    """``options[backend][key]`` as a bool (``default`` when absent)."""
    value = options.get(backend, {}).get(key, default) if isinstance(options, dict) else default
    return _flag(value, f"backend_options.{backend}.{key}")


def input_shapes(inputs: tuple[TensorSpec, ...], batched: bool) -> dict[str, tuple[int, ...]]:
    """Input name -> its shape without the batch dim (the manifest's shapes include it)."""
    return {t.name: t.shape[1:] if batched else t.shape for t in inputs}


def _external_data(value: Any) -> dict[str, tuple[str, ...]]:
    if not isinstance(value, dict) or not all(
            isinstance(v, list) and v and all(isinstance(x, str) for x in v)
            for v in value.values()):
        raise BundleError("manifest key 'external_data' must map backends to non-empty lists "
                          "of file paths")
    return {str(k): tuple(v) for k, v in value.items()}


def _input_formats(d: dict[str, Any], name: str) -> dict[str, str]:
    if "input_formats" not in d:
        return {}
    from packager.bundle.input_format import check_input_formats

    inputs = tuple(TensorSpec.from_dict(x) for x in d["inputs"])
    batched = int(dict(d.get("batching", {})).get("max_batch_size", 0)) > 0
    try:
        return check_input_formats(d["input_formats"], input_shapes(inputs, batched))
    except BundleError as exc:
        raise BundleError(f"manifest of {name!r}: {exc}") from None


def _sequence(d: dict[str, Any]) -> SequenceConfig | None:
    if "sequence" not in d:
        return None
    config = SequenceConfig.from_dict(d["sequence"])
    inputs = {str(t["name"]): t for t in d["inputs"]}
    outputs = {str(t["name"]): t for t in d["outputs"]}
    missing = [c.name for c in config.control_inputs if c.name not in inputs]
    if missing:
        raise BundleError(f"manifest of {d.get('name', '')!r}: sequence control inputs "
                          f"{missing} are not inputs of the model")
    for t in config.states:
        given, answered = inputs.get(t.input_name), outputs.get(t.output_name)
        if given is None or answered is None or given["datatype"] != answered["datatype"]:
            raise BundleError(f"manifest of {d.get('name', '')!r}: sequence state "
                              f"{t.input_name}/{t.output_name} must be an input and an "
                              "output of one datatype")
    return config


@dataclass(frozen=True)
class Manifest:
    """Everything the agent needs to know about one model version for one device profile."""

    name: str
    version: int
    profile: str
    arch: str
    backend: str
    precision: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    batching: BatchingConfig
    # backend name -> entry file (relative path) that backend loads, e.g.
    # {"openvino": "artifacts/model.xml", "onnxruntime": "artifacts/model.onnx"}
    artifacts: dict[str, str]
    files: tuple[FileEntry, ...] = ()
    fallback_backend: str | None = None
    # backend name -> options, e.g. {"tensorrt": {"precision": "fp16", "min_batch": 1, ...}}
    backend_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    source_sha256: str = ""
    source_name: str = ""
    parity: dict[str, Any] = field(default_factory=dict)
    toolchain: dict[str, str] = field(default_factory=dict)
    created: str = ""
    format_version: int = FORMAT_VERSION
    # the model opts into the agent's response cache by default (edge-pack build
    # --response-cache); written only when True, so older bundles keep their bytes
    response_cache: bool = False
    # output name -> its class labels, one per class index (edge-pack build --labels; a copy
    # is the bundle file labels/OUTPUT.txt); written only when given, like response_cache
    labels: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # the agent may warm up and health-probe the model with made-up inputs at load
    warmup: bool = True
    # every request may answer with several responses (ModelStreamInfer only)
    decoupled: bool = False

    # input name -> "NCHW" | "NHWC" (packager/bundle/input_format.py); written only when set
    input_formats: dict[str, str] = field(default_factory=dict)
    # a stateful model's sequence batcher; written only when set
    sequence: SequenceConfig | None = None
    # backend -> the data files its ONNX entry keeps its weights in (ONNX external data, beside
    # the entry); written only when some (format version 2)
    external_data: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if (self.format_version == EXTERNAL_DATA_FORMAT) != bool(self.external_data):
            raise BundleError(
                f"manifest of {self.name!r}: format_version {self.format_version} "
                + ("needs 'external_data'" if self.format_version == EXTERNAL_DATA_FORMAT
                   else f"with 'external_data' must be {EXTERNAL_DATA_FORMAT}"))
        for key, default in LEGACY_FLAGS.items():
            legacy = _legacy_flag(self.backend_options, self.backend, key, default)
            if getattr(self, key) == default and legacy != default:  # a bundle of before
                object.__setattr__(self, key, legacy)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if not self.response_cache:
            del d["response_cache"]
        if self.labels:
            d["labels"] = {k: list(v) for k, v in self.labels.items()}
        else:
            del d["labels"]
        for key, default in LEGACY_FLAGS.items():
            # written only when it says more than the defaults and the bundles of before the
            # field (which carried it in backend_options[backend]) say: their bytes, and so
            # their signatures, stay as they were
            if d[key] == _legacy_flag(self.backend_options, self.backend, key, default):
                del d[key]
        if not self.input_formats:
            del d["input_formats"]
        if self.sequence is None:
            del d["sequence"]
        elif not self.sequence.states:
            del d["sequence"]["states"]
        if self.external_data:
            d["external_data"] = {k: list(v) for k, v in self.external_data.items()}
        else:
            del d["external_data"]
        return d

    def canonical_bytes(self) -> bytes:
        """The exact bytes that are signed and stored as manifest.json."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"),
                          ensure_ascii=True).encode("utf-8")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Manifest:
        try:
            fv = int(d.get("format_version", 0))
            if fv not in FORMAT_VERSIONS:
                raise BundleError(
                    f"manifest format_version {fv} is not supported (this reader knows "
                    f"{', '.join(map(str, FORMAT_VERSIONS))}); upgrade edgeship or rebuild "
                    "the bundle")
            return cls(
                name=str(d["name"]),
                version=int(d["version"]),
                profile=str(d["profile"]),
                arch=str(d["arch"]),
                backend=str(d["backend"]),
                precision=str(d["precision"]),
                inputs=tuple(TensorSpec.from_dict(x) for x in d["inputs"]),
                outputs=tuple(TensorSpec.from_dict(x) for x in d["outputs"]),
                batching=BatchingConfig.from_dict(d.get("batching", {})),
                artifacts={str(k): str(v) for k, v in d["artifacts"].items()},
                files=tuple(FileEntry(str(f["path"]), int(f["size"]), str(f["sha256"]))
                            for f in d.get("files", ())),
                fallback_backend=d.get("fallback_backend"),
                backend_options=dict(d.get("backend_options", {})),
                source_sha256=str(d.get("source_sha256", "")),
                source_name=str(d.get("source_name", "")),
                parity=dict(d.get("parity", {})),
                toolchain={str(k): str(v) for k, v in d.get("toolchain", {}).items()},
                created=str(d.get("created", "")),
                format_version=fv,
                response_cache=_flag(d.get("response_cache", False), "response_cache"),
                labels=_labels(d.get("labels", {})),
                **{key: _flag(d[key], key) for key in LEGACY_FLAGS if key in d},
                input_formats=_input_formats(d, str(d.get("name", ""))),
                sequence=_sequence(d),
                external_data=_external_data(d.get("external_data", {})),
            )
        except BundleError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise BundleError(f"manifest is malformed: {type(exc).__name__}: {exc}") from exc

    @classmethod
    def from_json(cls, data: bytes | str) -> Manifest:
        try:
            d = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise BundleError(f"manifest.json is not valid JSON: {exc}") from exc
        except RecursionError:
            raise BundleError("manifest.json is nested too deeply to be a manifest") from None
        if not isinstance(d, dict):
            raise BundleError("manifest.json must hold a JSON object")
        return cls.from_dict(d)

    @property
    def load_cost_bytes(self) -> int:
        """Resident bytes loading the artifact added in the build's parity runtime
        (``parity["load_rss_bytes"]``; 0: not measured). Kept inside ``parity`` so that agents
        older than the field read such manifests unchanged."""
        value = self.parity.get(LOAD_COST_KEY, 0)
        return int(value) if isinstance(value, int | float) and value > 0 else 0

    @property
    def batched(self) -> bool:
        """True when dim 0 of every tensor is a batch dimension the agent may batch along."""
        return self.batching.max_batch_size > 0
