"""Triton's ``config`` parameter of a model load, read as the live settings it asks for.

A RepositoryModelLoad (gRPC) or ``POST /v2/repository/models/NAME/load`` (HTTP) may carry
``config``: a model configuration as Triton's ModelConfig JSON. The agent serves signed bundles,
so of that configuration it applies only what it can change on a loaded model, through the live
settings path (edge_agent/deploy/live_settings.py), and refuses every other field by name
(ModelConfig field -> live setting):

- ``max_batch_size`` -> ``max_batch_size``
- ``dynamic_batching.preferred_batch_size`` -> ``preferred_batch_sizes``
- ``dynamic_batching.max_queue_delay_microseconds`` -> ``max_queue_delay_us``
- ``instance_group[0].count`` (one group; at most :data:`MAX_INSTANCES`) -> ``instances``

``name`` is accepted when it is the model's own, and an instance group's ``kind`` when it is
``KIND_AUTO``. Field names may be written as in the protobuf (``max_batch_size``) or in its
JSON form (``maxBatchSize``); integers as JSON numbers or decimal strings (protobuf's JSON
mapping writes 64-bit integers as strings). The fields given are applied over the model's
current live settings; the others keep their values.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from edge_agent.core.triton_wording import failed_to_load
from edge_agent.errors import InvalidInputError

APPLIED = ("max_batch_size", "dynamic_batching.preferred_batch_size",
           "dynamic_batching.max_queue_delay_microseconds", "instance_group[0].count")
"""The ModelConfig fields a load's ``config`` may change (each is a live setting)."""

MAX_INSTANCES = 64
"""The most instances a load's ``config`` may ask for (a model spec's limit too): the inference
port is unauthenticated, and each instance may be a runtime process."""

_CAMEL = re.compile(r"(?<!^)([A-Z])")
_INT32_MAX = (1 << 31) - 1


def _snake(key: str) -> str:
    return _CAMEL.sub(r"_\1", key).lower()


def _fields(doc: Mapping[str, Any]) -> dict[str, Any]:
    """``doc``'s fields under their protobuf names (JSON's lowerCamelCase accepted too)."""
    return {_snake(k): v for k, v in doc.items()}


def _integer(field: str, value: Any, low: int, high: int = _INT32_MAX) -> int:
    """A ModelConfig integer: a JSON number or a decimal string, from ``low`` to ``high``."""
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif ((isinstance(value, float) and value.is_integer())
          or (isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value.strip()))):
        number = int(value)
    if number is None or not low <= number <= high:
        raise InvalidInputError(f"config field '{field}' = {json.dumps(value)}: must be an "
                                f"integer from {low} to {high}")
    return number


def parse_config(name: str, text: Any) -> dict[str, Any]:
    """The ``config`` parameter's JSON object; InvalidInputError in Triton's words ("failed to
    load '<name>'", then ours) when it is not a JSON object."""
    if not isinstance(text, str):
        raise InvalidInputError(f"{failed_to_load(name)}: the 'config' parameter must be a "
                                "string holding the model configuration as JSON")
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise InvalidInputError(
            f"{failed_to_load(name)}: the 'config' parameter is not valid JSON ({exc}); send "
            "Triton's ModelConfig as one JSON object, e.g. '{\"max_batch_size\": 16}'") from None
    if not isinstance(doc, dict):
        raise InvalidInputError(
            f"{failed_to_load(name)}: the 'config' parameter must be a JSON object (Triton's "
            f"ModelConfig), not {type(doc).__name__}; e.g. '{{\"max_batch_size\": 16}}'")
    return doc


def _dynamic_batching(value: Any, settings: dict[str, Any], refused: list[str]) -> None:
    if not isinstance(value, dict):
        raise InvalidInputError("config field 'dynamic_batching' must be a JSON object")
    for key, item in _fields(value).items():
        if key == "preferred_batch_size":
            if not isinstance(item, list):
                raise InvalidInputError("config field 'dynamic_batching.preferred_batch_size' "
                                        "must be a list of integers")
            settings["preferred_batch_sizes"] = [
                _integer("dynamic_batching.preferred_batch_size", v, 1) for v in item]
        elif key == "max_queue_delay_microseconds":
            settings["max_queue_delay_us"] = _integer(
                "dynamic_batching.max_queue_delay_microseconds", item, 0)
        else:
            refused.append(f"dynamic_batching.{key}")


def _instance_group(value: Any, settings: dict[str, Any], refused: list[str]) -> None:
    if not isinstance(value, list) or len(value) != 1 or not isinstance(value[0], dict):
        raise InvalidInputError("config field 'instance_group' must list exactly one group "
                                "(this agent runs a model's instances on one device)")
    for key, item in _fields(value[0]).items():
        if key == "count":
            settings["instances"] = _integer("instance_group[0].count", item, 1,
                                             MAX_INSTANCES)
        elif key == "kind" and item == "KIND_AUTO":
            continue
        else:
            refused.append(f"instance_group[0].{key}")


def config_settings(name: str, text: Any) -> dict[str, Any]:
    """The live settings a load's ``config`` parameter asks for (live settings keys -> values).

    InvalidInputError: the JSON is malformed (Triton's "failed to load" wording first), a value
    is out of range, or fields the agent cannot change are given (all of them named)."""
    doc = parse_config(name, text)
    settings: dict[str, Any] = {}
    refused: list[str] = []
    for key, value in _fields(doc).items():
        if key == "max_batch_size":
            settings["max_batch_size"] = _integer("max_batch_size", value, 0)
        elif key == "dynamic_batching":
            _dynamic_batching(value, settings, refused)
        elif key == "instance_group":
            _instance_group(value, settings, refused)
        elif key == "name" and value == name:
            continue
        else:
            refused.append(key)
    if refused:
        raise InvalidInputError(
            f"load of {name!r}: 'config' field(s) {', '.join(repr(k) for k in refused)} cannot "
            f"be changed on this agent; a load applies only {', '.join(APPLIED)} (as live "
            "settings), the rest comes from the model's signed bundle: build a new version "
            "with edge-pack and deploy it")
    return settings
