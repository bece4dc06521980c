"""The console's view of a fleet through the MQTT broker (docs/fleet.md): who is there
(retained presence), what each agent applied (retained status), the group's desired state,
and publishing a signed one. Protocol from :mod:`edge_agent.fleet.protocol`; the client from
:mod:`edge_agent.fleet.link` (the one place paho is used).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from console.errors import ConsoleError
from edge_agent.fleet import protocol as p
from edge_agent.fleet.link import BrokerCredentials, Connected, make_client, shut

SETTLE_S = 0.5
"""Retained messages arrive right after a subscription: the view is complete once this long
passes without a new one (bounded by the caller's timeout)."""


class FleetBrokerError(ConsoleError):
    """The broker could not be reached, or refused us, or a publish was not acknowledged."""


@dataclass
class AgentView:
    """One agent as the broker tells it: presence, last status and metrics."""

    agent_id: str
    presence: dict[str, Any] = field(default_factory=dict)
    status: dict[str, Any] | None = None
    metrics: dict[str, Any] | None = None

    @property
    def online(self) -> bool:
        return bool(self.presence.get("online"))

    @property
    def group(self) -> str:
        return str(self.presence.get("group") or (self.status or {}).get("group") or "")

    @property
    def revision(self) -> int:
        return int((self.status or {}).get("revision") or 0)

    @property
    def management(self) -> str:
        """The management API's HOST:PORT the agent said at connect ("": none)."""
        return str(self.presence.get("management") or "")

    @property
    def models(self) -> dict[str, Any]:
        """The status's models: name -> {ref, state, version, error}."""
        return dict((self.status or {}).get("models") or {})

    @property
    def state(self) -> str:
        """``offline``, ``failed`` (a model failed), ``ok`` or ``pending`` (no report yet)."""
        if not self.online:
            return "offline"
        models = self.models.values()
        if any(m.get("state") == "failed" for m in models):
            return "failed"
        return "ok" if models else "pending"

    def versions(self) -> list[str]:
        """``model:version`` of each model reported."""
        return [f"{m}:{s.get('version')}" for m, s in sorted(self.models.items())]

    def model_state(self, model: str, ref: str) -> str:
        """``ok``/``failed`` once the agent reported on ``ref`` for ``model``, else
        ``pending``."""
        entry = ((self.status or {}).get("models") or {}).get(model) or {}
        return str(entry.get("state")) if entry.get("ref") == ref else "pending"


def counts(agents: list[AgentView]) -> tuple[Counter[str], Counter[str]]:
    """Agents per state and per ``model:version``."""
    states: Counter[str] = Counter(a.state for a in agents)
    versions: Counter[str] = Counter(v for a in agents for v in a.versions())
    return states, versions


class FleetBroker:
    """A connected console client; use as a context manager."""

    def __init__(self, url: str, credentials: BrokerCredentials | None = None, *,
                 allow_plaintext: bool = False) -> None:
        try:
            self.broker = p.parse_broker_url(url, allow_plaintext=allow_plaintext)
        except ValueError as exc:
            raise FleetBrokerError(str(exc)) from None
        self.client = make_client(f"edge-console-{os.getpid()}-{time.monotonic_ns() % 10**9}",
                                  self.broker, credentials or BrokerCredentials())
        self.agents: dict[str, AgentView] = {}
        self.desired: dict[str, bytes] = {}  # group -> retained payload
        self._lock = threading.Condition()
        self._last_message = time.monotonic()
        self._connected = Connected()
        self.client.on_connect = self._on_connect
        self.client.on_message = self._on_message
        self.client.on_subscribe = self._on_subscribe
        self._subscribed = False

    def __enter__(self) -> FleetBroker:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def connect(self, timeout_s: float = 15.0) -> None:
        """Connect and subscribe to every agent's presence, status and metrics and every
        group's desired state."""
        try:
            self.client.connect(self.broker.host, self.broker.port, keepalive=30)
        except OSError as exc:
            raise FleetBrokerError(f"could not connect to the MQTT broker {self.broker}: "
                                   f"{exc}") from None
        self.client.loop_start()
        try:
            self._connected.wait(timeout_s, self.broker)
        except ConnectionError as exc:
            self.close()
            raise FleetBrokerError(str(exc)) from None
        self.client.subscribe([(p.ALL_PRESENCE, 1), (p.ALL_STATUS, 1), (p.ALL_METRICS, 0),
                               (p.ALL_GROUPS_DESIRED, 1)])

    def close(self) -> None:
        """Disconnect."""
        shut(self.client)

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any,
                    properties: Any) -> None:
        self._connected.record(reason)

    def _on_subscribe(self, client: Any, userdata: Any, mid: int, reasons: Any,
                      properties: Any) -> None:
        with self._lock:  # the retained messages follow the SUBACK
            self._subscribed = True
            self._last_message = time.monotonic()
            self._lock.notify_all()

    def _on_message(self, client: Any, userdata: Any, message: Any) -> None:
        topic, payload = message.topic, bytes(message.payload)
        with self._lock:
            self._last_message = time.monotonic()
            agent = p.agent_of(topic)
            if agent is not None:
                view = self.agents.setdefault(agent, AgentView(agent))
                try:
                    doc = json.loads(payload) if payload else None
                except ValueError:
                    doc = None
                kind = topic.rsplit("/", 1)[1]
                if kind == "presence":
                    view.presence = doc or {}
                elif kind == "status":
                    view.status = doc
                elif kind == "metrics":
                    view.metrics = doc
            elif topic.endswith("/desired"):
                group = topic.split("/")[-2]
                self.desired[group] = payload
            self._lock.notify_all()

    # ------------------------------------------------------------------ reading
    def settle(self, timeout_s: float = 10.0) -> None:
        """Wait until the retained messages have arrived: the subscription acknowledged, then
        quiet for SETTLE_S."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while time.monotonic() < deadline:
                quiet = time.monotonic() - self._last_message
                if self._subscribed and quiet >= SETTLE_S:
                    return
                self._lock.wait(max(0.05, SETTLE_S - quiet))

    def group_agents(self, group: str | None) -> list[AgentView]:
        """The agents that said they are in ``group`` (None: every group), online or not, by
        id."""
        with self._lock:
            return sorted((AgentView(a.agent_id, dict(a.presence), a.status, a.metrics)
                           for a in self.agents.values()
                           if group is None or a.group == group),
                          key=lambda a: a.agent_id)

    def agent(self, agent_id: str) -> AgentView | None:
        """One agent as the broker last told it (a copy), or None."""
        with self._lock:
            a = self.agents.get(agent_id)
            return None if a is None else AgentView(a.agent_id, dict(a.presence), a.status,
                                                    a.metrics)

    def current(self, group: str, timeout_s: float = 3.0) -> p.Desired | None:
        """The group's retained desired state (not verified: it is ours to replace), or None
        when there is none."""
        self.settle(timeout_s)
        with self._lock:
            payload = self.desired.get(group)
        if not payload:
            return None
        try:
            return p.Desired.from_json(json.loads(payload)["document"])
        except (ValueError, KeyError, TypeError, p.FleetProtocolError) as exc:
            raise FleetBrokerError(f"the retained desired state of group {group} is "
                                   f"unreadable ({exc}); publish a new one") from None

    def wait_until(self, condition: Callable[[], bool], timeout_s: float) -> bool:
        """Wait (woken by every message) until ``condition()``; False at the deadline."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while not condition():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(min(left, 0.5))
        return True

    # ------------------------------------------------------------------ writing
    def publish(self, desired: p.Desired, key: Ed25519PrivateKey, timeout_s: float = 15.0
                ) -> None:
        """Sign and publish ``desired`` retained (QoS 1) on its topic; wait for the ack."""
        topic = (p.agent_desired_topic(desired.agent) if desired.agent
                 else p.group_desired_topic(desired.group))
        info = self.client.publish(topic, p.sign_desired(desired, key), qos=1, retain=True)
        info.wait_for_publish(timeout_s)
        if not info.is_published():
            raise FleetBrokerError(f"the broker {self.broker} did not acknowledge the desired "
                                   f"state of group {desired.group} within {timeout_s:g} s")
