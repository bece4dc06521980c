"""Live settings: a model's ``[models.NAME]`` settings changed while the agent serves.

A change is a deployment of kind ``settings``: the requested settings are validated exactly as
agent.toml's section is (:func:`edge_agent.config.model_overrides`, so every key a model
section knows is a live setting too), recorded with the deployment, then the active version is
reloaded with them through the hot-swap path (load, warm up, probe, parity, switch, drain). The
model's live settings change in the store only when the deployment commits, in the same
transaction; a failed warm-up leaves the old copy serving with the old settings, and a crash
mid-way leaves the old settings in force at the next start.

Effective settings = the model's agent.toml section (with ``[models."*"]``) laid under its live
settings, key by key. Values travel as TOML literals (``4``, ``[1, 2]``, ``"process"``, ``true``);
a bare word is taken as a string.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from edge_agent.config import model_overrides
from edge_agent.config.device_bounds import check_model_bounds
from edge_agent.config.models import ModelOverrides
from edge_agent.core.deploy_port import DeployPort
from edge_agent.core.overrides import max_batch_problem
from edge_agent.core.sequences import instances_problem
from edge_agent.deploy.errors import InvalidSettingsError
from edge_agent.errors import AgentError
from edge_agent.state import StateStore
from packager.bundle.manifest import Manifest

log = logging.getLogger(__name__)

NOT_LIVE = {"default_version": "the served version changes with edge-console activate or "
                               "rollback, not with a settings change"}
"""Section keys that a settings change refuses, with the reason."""

_BATCHING_FROM_LOADED = ("max_batch_size", "preferred_batch_sizes", "max_queue_delay_us",
                         "instances", "threads", "max_queue_size", "default_timeout_us",
                         "allow_timeout_override")


def parse_value(text: str) -> Any:
    """A setting's value from its text: a TOML literal, else the text itself (a bare word)."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text.strip()


def format_value(value: Any) -> str:
    """A setting's value as a TOML literal ("" for None: not set)."""
    if value is None:
        return ""
    if isinstance(value, tuple):
        value = list(value)
    return json.dumps(value)


@dataclass(frozen=True, slots=True)
class SettingView:
    """One setting of a model: its effective value and where it comes from."""

    key: str
    value: str  # a TOML literal; "" when nothing sets it
    source: str  # "live", "agent.toml", "bundle" (the loaded version's value) or "default"


def known_keys() -> list[str]:
    """Every key a ``[models.NAME]`` section (and so a live setting) may hold."""
    return [f.name for f in dataclasses.fields(ModelOverrides)]


class LiveSettings:
    """Per-model live settings over the agent.toml overrides the repository was built with."""

    def __init__(self, plane: DeployPort, store: StateStore) -> None:
        self.plane = plane
        self.store = store
        self._base: dict[str, ModelOverrides] = {}

    def base(self, model: str) -> ModelOverrides:
        """The model's agent.toml overrides (captured before any live setting replaced them)."""
        if model not in self._base:
            self._base[model] = self.plane.overrides_for(model)
        return self._base[model]

    def live(self, model: str) -> dict[str, Any]:
        """The model's committed live settings (key -> value)."""
        raw = self.store.live_settings().get(model)
        return dict(json.loads(raw)) if raw else {}

    def merged(self, model: str, live: Mapping[str, Any]) -> ModelOverrides:
        """The overrides ``live`` makes of the model's agent.toml section; raises
        InvalidSettingsError naming the key when a key or value is not valid."""
        for key in live:
            if key in NOT_LIVE:
                raise InvalidSettingsError(f"setting '{key}' cannot be changed live: "
                                           f"{NOT_LIVE[key]}")
        try:
            checked = model_overrides(model, dict(live))
        except AgentError as exc:
            raise InvalidSettingsError(str(exc).replace("config key", "setting")) from None
        merged = dataclasses.replace(self.base(model),
                                     **{k: getattr(checked, k) for k in live})
        try:  # bounds across keys: the live ones together with agent.toml's
            check_model_bounds(f"models.{model}", dataclasses.asdict(merged))
        except AgentError as exc:
            raise InvalidSettingsError(str(exc).replace("config key", "setting")) from None
        return merged

    def plan(self, model: str, set_values: Mapping[str, Any], unset: Sequence[str],
             replace: bool) -> tuple[dict[str, Any], dict[str, Any], ModelOverrides]:
        """(before, after, the overrides after) for a change; raises InvalidSettingsError."""
        before = self.live(model)
        after = {} if replace else dict(before)
        known = known_keys()
        for key in unset:
            if key not in known and key not in before:  # a stale stored key may be dropped
                raise InvalidSettingsError(f"setting '{key}' is unknown; known settings: "
                                           f"{', '.join(known)}")
            after.pop(key, None)
        after.update(set_values)
        merged = self.merged(model, after)
        if "max_batch_size" in set_values and merged.max_batch_size is not None:
            self._check(model, "max_batch_size", merged.max_batch_size, max_batch_problem)
        if "instances" in set_values and merged.instances is not None:
            self._check(model, "instances", merged.instances, instances_problem)
        return before, after, merged

    def _check(self, model: str, key: str, value: int,
               problem_of: Callable[[Manifest, int], str | None]) -> None:
        """InvalidSettingsError when the loaded model does not allow ``value`` for ``key``
        (a model not loaded is checked at its load)."""
        try:
            manifest = self.plane.resolve(model).manifest
        except AgentError:
            return
        problem = problem_of(manifest, value)
        if problem is not None:
            raise InvalidSettingsError(f"setting '{key}' = {value}: {problem}")

    def apply_stored(self, notify: Callable[[str], None]) -> None:
        """At start-up, before any load: lay every model's committed live settings over its
        agent.toml section. A stored setting this agent does not accept is skipped (noted);
        the others apply."""
        for model, raw in sorted(self.store.live_settings().items()):
            try:
                live = dict(json.loads(raw))
            except ValueError as exc:
                notify(f"{model}: live settings {raw!r} not applied: {exc}")
                continue
            good: dict[str, Any] = {}
            for key, value in live.items():
                try:
                    self.merged(model, {key: value})
                except InvalidSettingsError as exc:
                    notify(f"{model}: live setting {key} = {format_value(value)} not applied: "
                           f"{exc}")
                    continue
                good[key] = value
            try:
                self.plane.set_overrides(model, self.merged(model, good))
            except InvalidSettingsError as exc:  # keys valid alone, not together
                notify(f"{model}: live settings {raw} not applied: {exc}")

    def view(self, model: str) -> list[SettingView]:
        """Every setting of ``model``: effective value and source."""
        live, base = self.live(model), self.base(model)
        defaults = ModelOverrides()
        loaded = None
        with contextlib.suppress(AgentError):
            loaded = self.plane.resolve(model).batching
        out = []
        for key in known_keys():
            if key in live:
                out.append(SettingView(key, format_value(live[key]), "live"))
                continue
            value = getattr(base, key)
            if value != getattr(defaults, key):
                out.append(SettingView(key, format_value(value), "agent.toml"))
            elif loaded is not None and key in _BATCHING_FROM_LOADED:
                out.append(SettingView(key, format_value(getattr(loaded, key)), "bundle"))
            else:
                out.append(SettingView(key, format_value(value), "default"))
        return out


def describe_change(before: Mapping[str, Any], after: Mapping[str, Any]) -> str:
    """One line: what a change sets and unsets (``instances 1 -> 2; threads unset``)."""
    parts = []
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key), after.get(key)
        if key not in after:
            parts.append(f"{key} {format_value(old)} -> (agent.toml)")
        elif key not in before:
            parts.append(f"{key} = {format_value(new)}")
        elif old != new:
            parts.append(f"{key} {format_value(old)} -> {format_value(new)}")
    return "; ".join(parts) or "no change"
