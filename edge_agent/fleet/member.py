"""The agent's side of the fleet protocol (docs/fleet.md): connect out to the broker, follow
the group's (and its own) retained desired state, verify it, converge through the deploy
manager, report status and a metrics summary.

Threads: paho's network loop (``loop_start``) only queues what arrives; one worker thread
(``edge-fleet``) verifies, deploys and publishes, so a pull never blocks keep-alives.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from edge_agent.config.fleet import FleetConfig
from edge_agent.config.management import RegistrySettings
from edge_agent.deploy import caller
from edge_agent.deploy.manager import ModelManager
from edge_agent.deploy.registry_source import deploy_by_reference, pull_guard
from edge_agent.errors import AgentError, ConfigError, ModelNotFoundError
from edge_agent.fleet import protocol as p
from edge_agent.fleet.link import BrokerCredentials, Connected, make_client, shut
from edge_agent.logthrottle import LogThrottle
from edge_agent.metrics import MetricsStore
from packager.bundle.errors import PackagerError
from packager.bundle.oci.client import TransferGuard
from packager.bundle.signing import load_public_key

log = logging.getLogger(__name__)

STATE_FILE = "fleet.json"
SCOPES = ("group", "agent")
IDLE_CHECK_S = 60.0
"""With ``metrics_interval_s = 0`` the worker still wakes this often to see what the device
serves (an operator's change, a failed deploy's retry)."""
REFUSAL_REPORT_S = 30.0
"""A status that differs only by a new refusal is published at most this often: a broker
that floods forged documents gets one report per period, not one per document."""


@dataclass
class _Held:
    """What the member keeps across restarts (STATE_DIR/fleet.json)."""

    revisions: dict[str, int] = field(default_factory=dict)  # scope -> highest applied
    digests: dict[str, str] = field(default_factory=dict)  # scope -> that document's sha256
    documents: dict[str, str] = field(default_factory=dict)  # scope -> the verified payload
    deployed: dict[str, list[Any]] = field(default_factory=dict)  # ref -> [model, version]
    owned: dict[str, float] = field(default_factory=dict)  # model the fleet put here -> when

    @classmethod
    def load(cls, path: Path) -> _Held:
        try:
            data = json.loads(path.read_text())
            return cls(**{k: data.get(k, {}) for k in ("revisions", "digests", "documents",
                                                       "deployed", "owned")})
        except FileNotFoundError:
            return cls()
        except (OSError, ValueError, TypeError) as exc:
            log.warning("fleet: %s is unreadable (%s); starting from revision 0", path, exc)
            return cls()

    def save(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.__dict__))
        os.replace(tmp, path)


def backoff_s(attempts: int, initial_s: float, max_s: float) -> float:
    """How long to wait after the ``attempts``-th failure in a row: ``initial_s`` doubling,
    never more than ``max_s``."""
    return float(min(max_s, initial_s * 2.0 ** min(max(attempts, 1) - 1, 40)))


@dataclass(frozen=True)
class _Failure:
    """A deploy (or a removal) that failed: tried again at ``due`` (monotonic)."""

    attempts: int
    due: float
    status: p.ModelStatus


class FleetMember:
    """One agent's membership of a fleet group; :meth:`start` once, :meth:`stop` once."""

    def __init__(self, config: FleetConfig, manager: ModelManager, *, state_dir: Path,
                 name: str, registry: Callable[[], RegistrySettings],
                 metrics: MetricsStore | None = None, info: Mapping[str, Any] | None = None
                 ) -> None:
        assert config.broker is not None
        try:
            self.broker = p.parse_broker_url(config.broker,
                                             allow_plaintext=config.allow_plaintext)
            self.group = p.check_name("fleet.group", config.group)
            self.agent_id = p.check_name("fleet.agent_id", config.agent_id or name)
        except ValueError as exc:
            raise ConfigError(f"[fleet]: {exc}") from None
        self.config = config
        self.manager = manager
        self.registry = registry
        self.metrics = metrics
        self.info = dict(info or {})
        self._path = Path(state_dir) / STATE_FILE
        self._held = _Held.load(self._path)
        self._inbox: queue.Queue[tuple[str, bytes] | None] = queue.Queue()
        self._stop = threading.Event()
        self._connected = Connected()
        self._guard: TransferGuard | None = None
        self._status: dict[str, p.ModelStatus] = {}
        self._refused: dict[str, Any] | None = None
        self._last_status = b""
        self._last_core = b""  # the last status published without its refusal
        self._published_at = -REFUSAL_REPORT_S
        self._deferred = False  # a refusal not reported yet
        self._refusal_log = LogThrottle(log, interval_s=60.0, burst=5)
        self._failures: dict[tuple[str, str], _Failure] = {}  # (model, ref): backing off
        self._left: set[tuple[str, str]] = set()  # (model, ref) changed on the device
        self._thread = threading.Thread(target=self._run, name="edge-fleet", daemon=True)
        password = (config.password_file.read_text().strip()
                    if config.password_file is not None else None)
        self.client = make_client(
            f"edge-agent-{self.agent_id}", self.broker,
            BrokerCredentials(config.ca_file, config.client_cert, config.client_key,
                              config.username, password),
            will=(p.presence_topic(self.agent_id),
                  p.presence_document(self.agent_id, self.group, False)))
        self.client.on_connect = self._on_connect
        self.client.on_message = self._on_message

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Connect in the background (reconnecting on its own) and start the worker."""
        self.client.connect_async(self.broker.host, self.broker.port,
                                  keepalive=self.config.keepalive_s)
        self.client.loop_start()
        self._thread.start()
        log.info("fleet: %s in group %s through %s", self.agent_id, self.group, self.broker)

    def stop(self, wait_s: float = 10.0) -> None:
        """Say offline, disconnect, end a pull under way and the worker."""
        self._stop.set()
        guard = self._guard
        if guard is not None:
            guard.stop("the agent is stopping")
        self._inbox.put(None)
        self._thread.join(wait_s)
        with contextlib.suppress(Exception):
            if self.client.is_connected():
                info = self.client.publish(p.presence_topic(self.agent_id),
                                           p.presence_document(self.agent_id, self.group,
                                                               False), qos=1, retain=True)
                info.wait_for_publish(2.0)
        shut(self.client)

    # ------------------------------------------------------------------ paho callbacks
    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any,
                    properties: Any) -> None:
        if not self._connected.record(reason):
            log.warning("fleet: the broker %s refused the connection: %s", self.broker, reason)
            return
        client.publish(p.presence_topic(self.agent_id),
                       p.presence_document(self.agent_id, self.group, True, **self.info),
                       qos=1, retain=True)
        client.subscribe([(p.group_desired_topic(self.group), 1),
                          (p.agent_desired_topic(self.agent_id), 1)])
        self._last_status = self._last_core = b""  # the status again on every connect
        self._inbox.put(("", b""))
        log.info("fleet: connected to %s", self.broker)

    def _on_message(self, client: Any, userdata: Any, message: Any) -> None:
        self._inbox.put((message.topic, bytes(message.payload)))

    # ------------------------------------------------------------------ worker
    def _run(self) -> None:
        with caller.acting_as(f"the fleet broker {self.broker} (group {self.group})"):
            # the worker wakes at least this often (metrics, or a look at what the device
            # serves when metrics are off: never a busy loop)
            period = self.config.metrics_interval_s or IDLE_CHECK_S
            next_metrics = time.monotonic() + period
            while not self._stop.is_set():
                wake = min([next_metrics, *(f.due for f in self._failures.values())])
                if self._deferred:
                    wake = min(wake, self._published_at + REFUSAL_REPORT_S)
                timeout = max(0.1, wake - time.monotonic())
                try:
                    item = self._inbox.get(timeout=timeout)
                except queue.Empty:
                    item = ("", b"")
                if item is None:
                    return
                latest = {item[0]: item[1]}
                while True:  # only the newest document per topic matters
                    try:
                        more = self._inbox.get_nowait()
                    except queue.Empty:
                        break
                    if more is None:
                        return
                    latest[more[0]] = more[1]
                try:
                    self._handle(latest)
                except Exception:  # the link must outlive any one bad document
                    log.exception("fleet: handling a desired state failed")
                if time.monotonic() >= next_metrics:
                    next_metrics = time.monotonic() + period
                    if self.config.metrics_interval_s > 0:
                        self._publish_metrics()

    def _handle(self, latest: Mapping[str, bytes]) -> None:
        for topic, payload in latest.items():
            if not topic:
                continue
            scope = "agent" if topic == p.agent_desired_topic(self.agent_id) else "group"
            if not payload:  # a retained document cleared: the agent's own no longer counts
                if scope == "agent" and "agent" in self._held.documents:
                    del self._held.documents["agent"]
                    log.info("fleet: the agent's own desired state was cleared; following "
                             "the group's")
                    self._fresh_start()
                    self._held.save(self._path)
                continue
            self._accept(scope, payload)
        self._converge()
        self._publish_status()

    def _trusted(self) -> list[Ed25519PublicKey]:
        keys = []
        for path in self.manager.settings.trusted_keys:
            try:
                keys.append(load_public_key(path))
            except PackagerError as exc:
                log.warning("fleet: trusted key %s: %s", path, exc)
        return keys

    def _accept(self, scope: str, payload: bytes) -> None:
        """Verify a document; keep it when it is newer, else record the refusal."""
        digest = p.document_digest(payload)
        try:
            desired, key = p.verify_desired(payload, self._trusted())
            if desired.group != self.group or desired.agent not in (None, self.agent_id):
                raise p.FleetProtocolError("wrong-target", f"desired state for group "
                                           f"{desired.group} agent {desired.agent} is not "
                                           "for this agent")
            p.check_revision(desired, self._held.revisions.get(scope, 0),
                             self._held.digests.get(scope, ""), digest)
        except p.FleetProtocolError as exc:
            self._refusal_log.log(logging.WARNING, f"refused-{exc.reason}",
                                  "fleet: refused a %s desired state (%s): %s", scope,
                                  exc.reason, exc)
            self._refused = {"scope": scope, "reason": exc.reason, "message": str(exc),
                             "at": round(time.time(), 3)}
            return
        if digest != self._held.digests.get(scope):
            log.info("fleet: %s desired state revision %d accepted (signed by key %s)", scope,
                     desired.revision, key)
            self._fresh_start()
            self._refused = None
        self._held.revisions[scope] = desired.revision
        self._held.digests[scope] = digest
        self._held.documents[scope] = payload.decode()
        self._held.save(self._path)

    def _desired(self, scope: str) -> p.Desired | None:
        text = self._held.documents.get(scope)
        return p.Desired.from_json(json.loads(text)["document"]) if text else None

    def revision(self) -> int:
        """The group revision applied (0: none)."""
        return self._held.revisions.get("group", 0)

    def _targets(self) -> dict[str, p.ModelTarget]:
        targets: dict[str, p.ModelTarget] = {}
        for scope in SCOPES:
            desired = self._desired(scope)
            if desired is not None:
                targets.update(desired.targets_for(self.agent_id))
        return targets

    def _fresh_start(self) -> None:
        """A new desired state: every failed model is tried again at once, and a change on
        the device no longer holds the fleet back."""
        self._failures.clear()
        self._left.clear()

    def _converge(self) -> None:
        targets = self._targets()
        self._status = {k: v for k, v in self._status.items() if k in targets}
        for model in sorted(set(self._held.owned) - set(targets)):
            if self._stop.is_set():
                return
            self._remove(model)
        for model, target in targets.items():
            if self._stop.is_set():
                return
            self._status[model] = self._converge_model(model, target)

    def _remove(self, model: str) -> None:
        """``model``, which the fleet put here, is no longer desired: delete it, unless
        what is active now was deployed on the device itself (then it is left alone)."""
        failure = self._failures.get((model, ""))
        if failure is not None and time.monotonic() < failure.due:
            return
        active = self.manager.store.active_version(model)
        ours = {int(v[1]) for v in self._held.deployed.values() if v[0] == model}
        if active is not None and active not in ours:
            log.info("fleet: %s is no longer in the desired state; version %d was activated "
                     "on this device, not by the fleet: left as it is", model, active)
        else:
            try:
                outcome = self.manager.remove_model(model)
                if not outcome.ok:
                    raise AgentError(outcome.message)
                log.info("fleet: %s removed: the desired state no longer names it", model)
            except ModelNotFoundError:
                pass  # removed on the device already
            except AgentError as exc:
                self._failed(model, "", active, f"removal: {exc}")
                return
        self._failures.pop((model, ""), None)
        del self._held.owned[model]
        self._held.deployed = {ref: v for ref, v in self._held.deployed.items()
                               if v[0] != model}
        self._held.save(self._path)

    def _failed(self, model: str, ref: str, version: int | None, error: str
                ) -> p.ModelStatus:
        """Record a failure of ``model`` at ``ref`` (``""``: its removal) and when to try
        again: ``retry_initial_s`` doubling up to ``retry_max_s``."""
        before = self._failures.get((model, ref))
        attempts = 1 if before is None else before.attempts + 1
        delay = backoff_s(attempts, self.config.retry_initial_s, self.config.retry_max_s)
        status = p.ModelStatus(ref, "failed", version, error, retry_at=round(
            time.time() + delay, 3), attempts=attempts)
        self._failures[(model, ref)] = _Failure(attempts, time.monotonic() + delay, status)
        log.warning("fleet: %s: %s failed (attempt %d; next in %g s): %s", model,
                    ref or "removal", attempts, delay, error)
        return status

    def _converge_model(self, model: str, target: p.ModelTarget) -> p.ModelStatus:
        store = self.manager.store
        active = store.active_version(model)
        before = self._status.get(model)
        if (before is not None and before.ref == target.ref and before.state == "ok"
                and before.version != active):  # rolled back on the device: do not fight it
            self._left.add((model, target.ref))
            return p.ModelStatus(target.ref, "failed", active, f"version {before.version} is "
                                 f"no longer active (now {active}): rolled back on this device")
        known = self._held.deployed.get(target.ref)
        if known is not None and known[0] == model and known[1] == active:
            self._failures.pop((model, target.ref), None)
            return self._settle(model, target, active)
        if (model, target.ref) in self._left and before is not None:
            return before
        failure = self._failures.get((model, target.ref))
        if failure is not None and time.monotonic() < failure.due:
            return failure.status
        fresh = not store.versions(model)  # the fleet puts the model here
        try:
            if known is not None and known[0] == model and store.version(model, known[1]):
                log.info("fleet: %s: activating version %d again for %s", model, known[1],
                         target.ref)
                outcome = self.manager.activate(model, int(known[1]))
            else:
                log.info("fleet: %s: deploying %s", model, target.ref)
                self._guard = pull_guard(self.registry())
                try:
                    outcome = deploy_by_reference(self.manager, target.ref, self.registry(),
                                                  guard=self._guard)
                finally:
                    self._guard = None
        except AgentError as exc:
            return self._failed(model, target.ref, active, str(exc))
        dep = outcome.deployment
        if dep.model != model:
            return self._failed(model, target.ref, store.active_version(model),
                                f"{target.ref} holds model {dep.model}, not {model}")
        if dep.to_version is not None:
            self._held.deployed[target.ref] = [model, dep.to_version]
            if fresh:
                self._held.owned.setdefault(model, round(time.time(), 3))
            self._held.save(self._path)
        if not outcome.ok:
            return self._failed(model, target.ref, outcome.active_version, outcome.message)
        self._failures.pop((model, target.ref), None)
        return self._settle(model, target, outcome.active_version)

    def _settle(self, model: str, target: p.ModelTarget, version: int | None) -> p.ModelStatus:
        """Apply the target's live settings when they differ; the model's status."""
        if target.settings:
            current = {v.key: v.value for v in self.manager.model_settings(model)
                       if v.source == "live"}
            wanted = {k: json.dumps(v) for k, v in target.settings.items()}  # TOML literals
            if current != wanted:
                try:
                    outcome = self.manager.change_settings(model, dict(target.settings),
                                                           replace=True)
                except AgentError as exc:
                    return p.ModelStatus(target.ref, "failed", version, f"settings: {exc}")
                if not outcome.ok:
                    return p.ModelStatus(target.ref, "failed", version,
                                         f"settings: {outcome.message}")
        return p.ModelStatus(target.ref, "ok", version)

    # ------------------------------------------------------------------ reports
    def _publish_status(self) -> None:
        agent_revision = self._held.revisions.get("agent", 0)
        body = p.status_document(self.agent_id, self.group, self.revision(), self._status,
                                 self._refused, 0.0, agent_revision)
        core = p.status_document(self.agent_id, self.group, self.revision(), self._status,
                                 None, 0.0, agent_revision)
        if body == self._last_status or not self.client.is_connected():
            return
        now = time.monotonic()
        if core == self._last_core and now - self._published_at < REFUSAL_REPORT_S:
            self._deferred = True  # only the refusal changed: reported with the period
            return
        self._last_status, self._last_core = body, core
        self._published_at, self._deferred = now, False
        self.client.publish(p.status_topic(self.agent_id),
                            p.status_document(self.agent_id, self.group, self.revision(),
                                              self._status, self._refused, time.time(),
                                              agent_revision),
                            qos=1, retain=True)

    def _publish_metrics(self) -> None:
        if self.metrics is None or not self.client.is_connected():
            return
        models = {f"{m.model}:{m.version}": {"rps": round(m.requests_per_s, 2),
                                             "errors": m.errors,
                                             "p95_ms": None if m.p95_ms is None
                                             else round(m.p95_ms, 2)}
                  for m in self.metrics.summary(60)}
        system = self.metrics.latest_system()
        body = {"agent": self.agent_id, "at": round(time.time()), "models": models,
                "rss_mib": None if system is None else round(system.rss_bytes / 2**20),
                "cpu": None if system is None else round(system.cpu_percent)}
        self.client.publish(p.metrics_topic(self.agent_id),
                            json.dumps(body, separators=(",", ":")).encode(), qos=0)
