"""``[models.NAME]`` and ``[models."*"]``: the per-model settings the agent's configuration
may lay over a bundle's manifest, and the agent-wide serving limits (``[agent]``,
``[response_cache]``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from edge_agent.config.device_bounds import check_model_bounds
from edge_agent.config.fields import (
    Key,
    at_least_one,
    boolean,
    expect_table,
    mib,
    non_negative_int,
    one_of,
    parse_table,
    seconds,
    string,
    typed,
)
from edge_agent.errors import ConfigError

DEFAULT_MAX_QUEUE_SIZE = 1024
"""Queue bound (requests) used when neither the manifest nor the agent config sets one."""

DEFAULT_EXECUTION_TIMEOUT_MS = 60_000
"""How long one backend execution may run before it is cancelled (0 in the config: never)."""

DEFAULT_LOAD_TIMEOUT_MS = 30_000
"""How long a request waits for an on-demand load before it is answered UNAVAILABLE."""

LOAD_MODES = ("eager", "on-demand")

MAX_PRIORITY_VALUE = 1 << 31
"""The largest priority number accepted (the lowest priority)."""

ISOLATION_MODES = ("auto", "process", "thread")
"""``process``: each instance in a runtime process of its own (edge_agent.backends.isolated);
``thread``: in the agent's process; ``auto``: a process for backends that cannot cancel a
running inference (``Cancellation.NONE``: OpenVINO, TensorRT), the agent's process for the
others (ONNX Runtime)."""

OPENVINO_HINTS = ("LATENCY", "THROUGHPUT", "CUMULATIVE_THROUGHPUT")

RESPONSE_CACHE_UNIT = 1 << 20
"""``[response_cache] size_mib`` is in MiB: the agent-wide byte budget of the response cache
(edge_agent.core.cache; 0, the default, means no cache). Models opt in one by one with
``[models.NAME] response_cache = true``."""


@dataclass(frozen=True, slots=True)
class ModelOverrides:
    """Agent-config overrides for one model; None keeps the manifest's value.

    ``max_batch_size`` may lower or raise the manifest's value up to what the artifact's batch
    dimension allows (core/overrides.py ``batch_ceiling``: any size when dim 0 is dynamic).
    ``default_version`` pins the version served when a request names none. ``backend`` and
    ``device`` replace the manifest's backend choice and the runtime's default device.
    ``response_cache`` serves repeated requests from the agent's response cache (core/cache.py);
    None follows the bundle's manifest (``edge-pack build --response-cache``).
    ``openvino_hint`` / ``openvino_streams`` replace the bundle's OpenVINO ``performance_hint``
    and the stream count (default: one stream per instance) when OpenVINO serves the model.
    ``priority`` (1 highest; None: core/gate.py's DEFAULT_PRIORITY) orders this model's
    executions against other models' when they wait for the device-wide execution gate.
    ``load`` ("eager": at start; "on-demand": by the first request, which waits up to
    ``load_timeout_ms``), ``idle_unload_s`` (unload after that long unused; None: never),
    ``pinned`` (never unloaded to make room or when idle) and ``version_policy`` (which versions
    a KServe RepositoryModelLoad loads: "active", "all", "latest N", "specific V,V") are the
    orchestration settings (core/orchestrator.py). ``memory_limit_mib`` bounds the
    resident memory of each runtime process of the model (with its children); None: the
    ``[agent] memory_budget_mib``, else half the device's memory.
    """

    max_batch_size: int | None = None
    preferred_batch_sizes: tuple[int, ...] | None = None
    max_queue_delay_us: int | None = None
    instances: int | None = None
    threads: int | None = None
    max_queue_size: int | None = None
    default_timeout_us: int | None = None
    allow_timeout_override: bool | None = None
    default_version: int | None = None
    backend: str | None = None
    device: str | None = None
    warmup: bool = True
    execution_timeout_ms: int | None = None
    isolation: str = "auto"
    response_cache: bool | None = None
    openvino_hint: str | None = None
    openvino_streams: int | None = None
    priority: int | None = None
    load: str = "eager"
    load_timeout_ms: int | None = None
    idle_unload_s: float | None = None
    pinned: bool = False
    version_policy: str = "active"
    memory_limit_mib: int | None = None

    def execution_timeout_s(self) -> float:
        """Seconds one backend execution may run before it is cancelled (0: no limit)."""
        ms = (self.execution_timeout_ms if self.execution_timeout_ms is not None
              else DEFAULT_EXECUTION_TIMEOUT_MS)
        return max(0, ms) / 1000


def parse_version_policy(policy: str) -> tuple[str, tuple[int, ...]]:
    """``"active"``, ``"all"``, ``"latest N"`` or ``"specific V,V"`` as (kind, numbers);
    ValueError with the accepted forms otherwise (Triton's version_policy, as one string)."""
    kind, _, rest = policy.strip().partition(" ")
    numbers = tuple(int(x) for x in rest.replace(",", " ").split() if x.isdigit())
    bad = [x for x in rest.replace(",", " ").split() if not x.isdigit()]
    if kind in ("active", "all") and not rest.strip():
        return kind, ()
    if kind == "latest" and len(numbers) == 1 and numbers[0] > 0 and not bad:
        return kind, numbers
    if kind == "specific" and numbers and not bad:
        return kind, numbers
    raise ValueError(f"version_policy {policy!r} is not one of \"active\", \"all\", "
                     "\"latest N\" (N >= 1) or \"specific V,V,...\"")


def _idle_unload(key: str, value: Any) -> float | None:
    return seconds(allow_zero=True)(key, value) or None


def _version_policy(key: str, value: Any) -> str:
    try:
        parse_version_policy(string(key, value))
    except ValueError as exc:
        raise ConfigError(f"config key '{key}': {exc}") from None
    return str(value)


def _priority(key: str, value: Any) -> int:
    if not 1 <= non_negative_int(key, value) <= MAX_PRIORITY_VALUE:
        raise ConfigError(f"config key '{key}': must be between 1 (the highest) "
                          f"and {MAX_PRIORITY_VALUE}")
    return int(value)


def _batch_sizes(key: str, value: Any) -> tuple[int, ...]:
    return tuple(non_negative_int(key, v) for v in typed(key, value, list))


MODEL_KEYS = (
    *(Key(name, non_negative_int) for name in (
        "max_batch_size", "max_queue_delay_us", "threads", "max_queue_size",
        "default_timeout_us", "default_version", "execution_timeout_ms", "load_timeout_ms")),
    Key("instances", at_least_one),
    Key("openvino_streams", at_least_one),
    Key("priority", _priority),
    Key("preferred_batch_sizes", _batch_sizes),
    *(Key(name, boolean) for name in ("allow_timeout_override", "warmup", "response_cache",
                                      "pinned")),
    Key("idle_unload_s", _idle_unload),
    Key("backend", string),
    Key("device", string),
    Key("isolation", one_of(ISOLATION_MODES)),
    Key("openvino_hint", one_of(OPENVINO_HINTS, upper=True)),
    Key("load", one_of(LOAD_MODES)),
    Key("version_policy", _version_policy),
    Key("memory_limit_mib", at_least_one),
)
assert {k.name for k in MODEL_KEYS} == {f.name for f in dataclasses.fields(ModelOverrides)}


def model_overrides(name: str, data: Mapping[str, Any]) -> ModelOverrides:
    """One ``[models.NAME]`` section checked exactly as agent.toml is (live settings use it),
    including the device's bounds (config/device_bounds.py)."""
    overrides = ModelOverrides(**parse_table(f"models.{name}", data, MODEL_KEYS))
    check_model_bounds(f"models.{name}", dataclasses.asdict(overrides))
    return overrides


@dataclass(frozen=True)
class ModelsConfig:
    """``[models.*]``, ``[agent]`` and ``[response_cache]``: how the data plane serves."""

    overrides: Mapping[str, ModelOverrides] = field(default_factory=dict)
    """``[models.NAME]`` (with ``[models."*"]`` under each)."""
    defaults: ModelOverrides = field(default_factory=ModelOverrides)
    """``[models."*"]``: settings for every model; a model's own section wins key by key."""
    response_cache_bytes: int = 0
    """``[response_cache] size_mib`` in bytes: the response cache's budget (0: no cache)."""
    max_concurrent_executions: int = 0
    """``[agent] max_concurrent_executions``: backend executions at once (0: the core count)."""
    memory_budget_bytes: int | None = None
    """``[agent] memory_budget_mib`` in bytes: the loaded versions' memory stays within it
    (None, the default: no budget)."""
    typed_input_bytes: int = 256 * 1024 * 1024
    """``[agent] max_typed_input_mib`` in bytes: what requests with gRPC typed contents or HTTP
    JSON data may take in memory at once, decoded (both front ends; beyond it:
    RESOURCE_EXHAUSTED / 429, retryable)."""


_AGENT_KEYS = (
    Key("max_concurrent_executions", non_negative_int),
    Key("memory_budget_mib", mib(allow_zero=False), "memory_budget_bytes"),
    Key("max_typed_input_mib", mib(allow_zero=False), "typed_input_bytes"),
)
_CACHE_KEYS = (Key("size_mib", mib(allow_zero=True), "response_cache_bytes"),)


def models_section(data: Mapping[str, Any]) -> ModelsConfig:
    """``[models]``, ``[agent]`` and ``[response_cache]`` of the parsed agent.toml."""
    sections = dict(expect_table("models", data.get("models", {})))
    every = expect_table('models."*"', sections.pop("*", {}))
    if "default_version" in every:
        raise ConfigError('config key \'models."*".default_version\': a default version is '
                          "chosen per model; set it in the model's own section")
    overrides = {str(name): model_overrides(str(name), {**every, **expect_table(
        f"models.{name}", section)}) for name, section in sections.items()}
    return ModelsConfig(overrides=overrides, defaults=model_overrides("*", every),
                        **parse_table("agent", data.get("agent", {}), _AGENT_KEYS),
                        **parse_table("response_cache", data.get("response_cache", {}),
                                      _CACHE_KEYS))
