"""The fleet protocol (docs/fleet.md): topics, JSON documents, their Ed25519 signature and
wave membership. Pure: no MQTT, no I/O; the agent and the console both build on it.

A desired state is signed with the release key that signs bundles (``edge-pack keygen``) and
verified with the agent's ``--trust`` keys, over the canonical JSON of the document (sorted
keys, no spaces, UTF-8). Whoever controls the broker can replay or withhold documents, never
forge one: the revision only grows, and an agent refuses anything at or below what it holds
unless it is the very document it applied.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from packager.bundle.signing import key_id, sign, verify_signature

PREFIX = "edge/v1"
DESIRED_KIND = "edge.fleet.desired/v1"
MAX_DOCUMENT_BYTES = 64 << 10
"""A desired state larger than this is refused unread (a broker cannot make an agent parse
megabytes)."""

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


class FleetProtocolError(Exception):
    """A fleet document that is malformed, unsigned, signed by an untrusted key, or stale.

    ``reason`` is a short machine-readable word (``unsigned``, ``untrusted-key``,
    ``bad-signature``, ``stale-revision``, ``malformed``, ``too-large``); the message says what
    to do."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


# ---------------------------------------------------------------------------------- broker
@dataclass(frozen=True)
class BrokerAddress:
    """Where the broker listens and whether the connection is TLS."""

    host: str
    port: int
    tls: bool

    def __str__(self) -> str:
        return f"{'mqtts' if self.tls else 'mqtt'}://{self.host}:{self.port}"

    @property
    def loopback(self) -> bool:
        """True for localhost and loopback addresses (where plaintext is allowed)."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


def parse_broker_url(text: str, *, allow_plaintext: bool = False) -> BrokerAddress:
    """``mqtts://HOST[:PORT]`` (8883 by default), or ``mqtt://HOST[:PORT]`` (1883) to a
    loopback host or when ``allow_plaintext``; ValueError saying what to write otherwise."""
    url = urlsplit(text)
    if url.scheme not in ("mqtt", "mqtts") or not url.hostname or url.path not in ("", "/"):
        raise ValueError(f"broker {text!r}: expected mqtts://HOST[:PORT] (or mqtt:// for "
                         "plaintext)")
    try:
        port = url.port
    except ValueError:
        raise ValueError(f"broker {text!r}: bad port") from None
    tls = url.scheme == "mqtts"
    broker = BrokerAddress(url.hostname, port or (8883 if tls else 1883), tls)
    if not tls and not allow_plaintext and not broker.loopback:
        raise ValueError(f"broker {text!r} is plaintext to another host; use mqtts:// (or "
                         "allow plaintext explicitly on a trusted network)")
    return broker


# ---------------------------------------------------------------------------------- topics
def check_name(what: str, value: str) -> str:
    """``value`` when it is a valid group or agent id (letters, digits, ``_.-``; no MQTT
    wildcards or separators), else ValueError naming ``what``."""
    if not _NAME.match(value):
        raise ValueError(f"{what} {value!r} is not a valid name: use 1-128 letters, digits, "
                         "'_', '.' or '-', starting with a letter or digit")
    return value


def group_desired_topic(group: str) -> str:
    """Retained: the group's signed desired state."""
    return f"{PREFIX}/groups/{group}/desired"


def agent_desired_topic(agent_id: str) -> str:
    """Retained: one agent's own signed desired state (its models win over the group's)."""
    return f"{PREFIX}/agents/{agent_id}/desired"


def presence_topic(agent_id: str) -> str:
    """Retained: ``{"online": true, ...}`` at connect; the last will sets ``online`` false."""
    return f"{PREFIX}/agents/{agent_id}/presence"


def status_topic(agent_id: str) -> str:
    """Retained: what the agent applied, per model, and the last refusal."""
    return f"{PREFIX}/agents/{agent_id}/status"


def metrics_topic(agent_id: str) -> str:
    """Not retained: the periodic metrics summary."""
    return f"{PREFIX}/agents/{agent_id}/metrics"


ALL_PRESENCE = f"{PREFIX}/agents/+/presence"
ALL_STATUS = f"{PREFIX}/agents/+/status"
ALL_METRICS = f"{PREFIX}/agents/+/metrics"
ALL_GROUPS_DESIRED = f"{PREFIX}/groups/+/desired"


def agent_of(topic: str) -> str | None:
    """The agent id in an ``edge/v1/agents/ID/...`` topic, else None."""
    parts = topic.split("/")
    if len(parts) == 5 and "/".join(parts[:3]) == f"{PREFIX}/agents":
        return parts[3]
    return None


# ---------------------------------------------------------------------------------- waves
def wave_bucket(group: str, agent_id: str) -> float:
    """The agent's place in ``group``'s rollouts, in [0, 100): the first 8 bytes of
    sha256("GROUP/AGENT_ID") scaled. Stable across restarts and identical in every
    implementation, so the console and the agent agree on who is in a wave."""
    digest = hashlib.sha256(f"{group}/{agent_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 * 100.0


def in_wave(group: str, agent_id: str, percent: float) -> bool:
    """True when the agent belongs to a wave covering ``percent`` of the group."""
    return percent >= 100.0 or wave_bucket(group, agent_id) < percent


def percent_for_count(group: str, agent_ids: Sequence[str], count: int) -> float:
    """The smallest wave percentage that takes in at least ``count`` of ``agent_ids`` (for a
    wave given as a number of agents)."""
    buckets = sorted(wave_bucket(group, a) for a in agent_ids)
    if count <= 0 or not buckets:
        return 0.0
    if count >= len(buckets):
        return 100.0
    return min(100.0, buckets[count - 1] + 1e-9)


# ---------------------------------------------------------------------------------- documents
@dataclass(frozen=True)
class ModelTarget:
    """One model of a desired state: the bundle pinned by digest and its live settings."""

    ref: str
    settings: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The document's form."""
        return {"ref": self.ref, "settings": dict(self.settings)}


@dataclass(frozen=True)
class Desired:
    """A desired state: models for the agents in the wave (``percent``), ``previous`` for
    the others; ``revision`` only grows. ``agent`` is set on an agent's own document."""

    group: str
    revision: int
    models: Mapping[str, ModelTarget]
    percent: float = 100.0
    previous: Mapping[str, ModelTarget] = field(default_factory=dict)
    agent: str | None = None
    issued_at: float = 0.0
    note: str = ""

    def targets_for(self, agent_id: str) -> Mapping[str, ModelTarget]:
        """What ``agent_id`` should serve under this document."""
        return self.models if in_wave(self.group, agent_id, self.percent) else self.previous

    def to_json(self) -> dict[str, Any]:
        """The document (what is signed)."""
        return {"kind": DESIRED_KIND, "group": self.group, "agent": self.agent,
                "revision": self.revision, "issued_at": self.issued_at, "note": self.note,
                "models": {k: v.to_json() for k, v in sorted(self.models.items())},
                "rollout": {"percent": self.percent,
                            "previous": {k: v.to_json()
                                         for k, v in sorted(self.previous.items())}}}

    @classmethod
    def from_json(cls, doc: Any) -> Desired:
        """Parse a document; FleetProtocolError ``malformed`` naming the field."""
        try:
            if not isinstance(doc, dict) or doc.get("kind") != DESIRED_KIND:
                raise ValueError(f"kind is not {DESIRED_KIND}")
            revision = doc["revision"]
            if isinstance(revision, bool) or not isinstance(revision, int) or revision < 1:
                raise ValueError("revision must be an integer >= 1")
            rollout = doc.get("rollout") or {}
            percent = float(rollout.get("percent", 100.0))
            if not 0.0 <= percent <= 100.0:
                raise ValueError("rollout.percent must be within 0-100")
            agent = doc.get("agent")
            return cls(group=check_name("group", str(doc["group"])), revision=revision,
                       models=_targets(doc.get("models") or {}), percent=percent,
                       previous=_targets(rollout.get("previous") or {}),
                       agent=None if agent is None else check_name("agent", str(agent)),
                       issued_at=float(doc.get("issued_at") or 0.0),
                       note=str(doc.get("note") or ""))
        except (KeyError, TypeError, ValueError) as exc:
            raise FleetProtocolError("malformed", f"malformed desired state: {exc}") from None


def _targets(raw: Any) -> dict[str, ModelTarget]:
    if not isinstance(raw, dict):
        raise ValueError("models must be an object of NAME: {ref, settings}")
    out: dict[str, ModelTarget] = {}
    for name, spec in raw.items():
        check_name("model", name)
        if not isinstance(spec, dict) or not isinstance(spec.get("ref"), str):
            raise ValueError(f"model {name}: expected {{\"ref\": \"oci://...@sha256:...\"}}")
        if "@sha256:" not in spec["ref"]:
            raise ValueError(f"model {name}: {spec['ref']} is not pinned by digest "
                             "(REF@sha256:...)")
        settings = spec.get("settings") or {}
        if not isinstance(settings, dict):
            raise ValueError(f"model {name}: settings must be an object")
        out[name] = ModelTarget(spec["ref"], settings)
    return out


def canonical(doc: Mapping[str, Any]) -> bytes:
    """The bytes a signature covers: sorted keys, no spaces, UTF-8."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sign_desired(desired: Desired, key: Ed25519PrivateKey) -> bytes:
    """The message to publish: ``{"document": ..., "signature": B64, "key_id": ...}``."""
    doc = desired.to_json()
    envelope = {"document": doc,
                "signature": base64.b64encode(sign(key, canonical(doc))).decode(),
                "key_id": key_id(key.public_key())}
    return json.dumps(envelope, separators=(",", ":")).encode()


def verify_desired(payload: bytes, trusted: Sequence[Ed25519PublicKey]) -> tuple[Desired, str]:
    """Check a published desired state against the ``trusted`` keys; returns it and the id of
    the key that signed it. FleetProtocolError (``too-large``, ``malformed``, ``unsigned``,
    ``untrusted-key``, ``bad-signature``) otherwise."""
    if len(payload) > MAX_DOCUMENT_BYTES:
        raise FleetProtocolError("too-large", f"desired state of {len(payload)} bytes is over "
                                 f"the {MAX_DOCUMENT_BYTES}-byte limit")
    try:
        envelope = json.loads(payload)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FleetProtocolError("malformed", f"desired state is not JSON: {exc}") from None
    if not isinstance(envelope, dict) or not isinstance(envelope.get("document"), dict):
        raise FleetProtocolError("malformed", "desired state has no document")
    sig_text = envelope.get("signature")
    if not sig_text:
        raise FleetProtocolError("unsigned", "desired state is unsigned; publish it with "
                                 "`edge-console fleet deploy --key RELEASE_KEY`")
    try:
        signature = base64.b64decode(str(sig_text), validate=True)
    except ValueError:
        raise FleetProtocolError("malformed", "desired state signature is not base64") from None
    doc = envelope["document"]
    data = canonical(doc)
    named = str(envelope.get("key_id") or "")
    if not trusted:
        raise FleetProtocolError("untrusted-key", "this agent trusts no key (--trust): every "
                                 "desired state is refused")
    for key in trusted:
        if verify_signature(key, signature, data):
            return Desired.from_json(doc), key_id(key)
    if named and named not in {key_id(k) for k in trusted}:
        raise FleetProtocolError("untrusted-key", f"desired state is signed by key {named}, "
                                 "which this agent does not trust (--trust)")
    raise FleetProtocolError("bad-signature", "desired state signature does not match any "
                             "trusted key (altered in transit, or signed by another key)")


def check_revision(desired: Desired, held: int, held_digest: str, digest: str) -> None:
    """Refuse a replay: the revision must exceed ``held`` (the highest applied in the same
    scope), unless it is the same document again (a retained message redelivered)."""
    if desired.revision > held or (desired.revision == held and digest == held_digest):
        return
    raise FleetProtocolError("stale-revision", f"desired state revision {desired.revision} is "
                             f"not above revision {held} already applied; publish a higher "
                             "revision")


def document_digest(payload: bytes) -> str:
    """sha256 of a published desired state (how a redelivered document is recognised)."""
    return hashlib.sha256(payload).hexdigest()


# ---------------------------------------------------------------------------------- reports
@dataclass(frozen=True)
class ModelStatus:
    """What an agent reports for one model of its desired state."""

    ref: str
    state: str  # "ok": serving it; "failed": could not (error says why); "pending"
    version: int | None = None
    error: str = ""
    retry_at: float | None = None  # failed: when the agent tries again (epoch seconds)
    attempts: int = 0  # failed: how many times in a row

    def to_json(self) -> dict[str, Any]:
        """The report's form (no secrets: a reference, a version, an error line)."""
        out: dict[str, Any] = {"ref": self.ref, "state": self.state, "version": self.version}
        if self.error:
            out["error"] = self.error
        if self.retry_at is not None:
            out["retry_at"], out["attempts"] = self.retry_at, self.attempts
        return out


def status_document(agent_id: str, group: str, revision: int,
                    models: Mapping[str, ModelStatus], refused: Mapping[str, Any] | None,
                    at: float, agent_revision: int = 0) -> bytes:
    """The retained status message: ``revision`` of the group's desired state applied,
    ``agent_revision`` of the agent's own (0: none)."""
    return json.dumps({"agent": agent_id, "group": group, "revision": revision,
                       "agent_revision": agent_revision, "at": round(at, 3),
                       "models": {k: v.to_json() for k, v in sorted(models.items())},
                       "refused": dict(refused) if refused else None},
                      separators=(",", ":")).encode()


def presence_document(agent_id: str, group: str, online: bool, **info: Any) -> bytes:
    """The retained presence message (``online`` false is the last will)."""
    return json.dumps({"agent": agent_id, "group": group, "online": online, **info},
                      separators=(",", ":")).encode()
