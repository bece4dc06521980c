"""Upper bounds on a model's settings, from the device the agent runs on.

A setting that asks for more than the device can give (``threads = 100000`` grew the agent by
40 MiB/s until it was 2.2 GiB; ``instances = 10000`` started 10,016 threads) is refused when the
section is validated, in agent.toml and as a live setting alike, with the bound and the reason.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from edge_agent.errors import ConfigError

INSTANCES_PER_CORE = 8
"""Instances (and OpenVINO streams, and instances x threads) allowed per usable core."""

MAX_QUEUE_SIZE = 65_536
MAX_BATCH_SIZE = 65_536
MAX_PREFERRED_BATCH_SIZES = 32
MAX_QUEUE_DELAY_US = 10_000_000  # 10 s
MAX_TIMEOUT_US = 3_600_000_000  # 1 h
MAX_TIMEOUT_MS = 3_600_000  # 1 h


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


_AT_MOST = {
    "max_queue_size": (MAX_QUEUE_SIZE, "requests queued per model"),
    "max_batch_size": (MAX_BATCH_SIZE, "the largest batch"),
    "max_queue_delay_us": (MAX_QUEUE_DELAY_US, "10 s"),
    "default_timeout_us": (MAX_TIMEOUT_US, "1 hour"),
    "execution_timeout_ms": (MAX_TIMEOUT_MS, "1 hour"),
    "load_timeout_ms": (MAX_TIMEOUT_MS, "1 hour"),
}


def check_model_bounds(section: str, values: Mapping[str, Any],
                       cores: int | None = None) -> None:
    """Refuse (ConfigError naming the key, the bound and why) a ``[models.NAME]`` value the
    device cannot serve. ``values``: the section's typed values (None: not set)."""
    cores = cores or usable_cores()
    many = INSTANCES_PER_CORE * cores

    def refuse(key: str, value: Any, why: str) -> None:
        raise ConfigError(f"config key '{section}.{key}': {value} {why}")

    threads = values.get("threads")
    if threads is not None and threads > cores:
        refuse("threads", threads, f"is more than this device's {cores} usable cores; use 0 "
               f"(the runtime's default) or 1-{cores}")
    for key in ("instances", "openvino_streams"):
        value = values.get(key)
        if value is not None and value > many:
            refuse(key, value, f"is more than {many} ({INSTANCES_PER_CORE} per usable core, "
                   f"{cores} cores): each costs a copy of the model's working memory and "
                   "threads of its own")
    instances, per = values.get("instances"), values.get("threads")
    if instances is not None and per and instances * per > many:
        refuse("instances", instances, f"x threads {per} = {instances * per} runtime threads, "
               f"more than {many} ({INSTANCES_PER_CORE} per usable core, {cores} cores)")
    sizes = values.get("preferred_batch_sizes")
    if sizes is not None and len(sizes) > MAX_PREFERRED_BATCH_SIZES:
        refuse("preferred_batch_sizes", f"{len(sizes)} sizes",
               f"are more than {MAX_PREFERRED_BATCH_SIZES}")
    if sizes:
        biggest = max(sizes)
        if biggest > MAX_BATCH_SIZE:
            refuse("preferred_batch_sizes", biggest, f"is more than {MAX_BATCH_SIZE}")
    for key, (bound, what) in _AT_MOST.items():
        value = values.get(key)
        if value is not None and value > bound:
            refuse(key, value, f"is more than {bound:,} ({what})")
