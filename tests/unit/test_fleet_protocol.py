"""The fleet protocol's pure parts (docs/fleet.md): signatures, revisions, wave membership,
names, broker URLs and the [fleet] table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from edge_agent.config.fleet import fleet_section
from edge_agent.errors import ConfigError
from edge_agent.fleet import protocol as p

REF = "oci://127.0.0.1:5000/edge/mlp@sha256:" + "a" * 64
OLD = "oci://127.0.0.1:5000/edge/mlp@sha256:" + "b" * 64


def _doc(revision: int = 3, percent: float = 100.0) -> p.Desired:
    return p.Desired("cams", revision, {"mlp": p.ModelTarget(REF, {"instances": 2})}, percent,
                     {"mlp": p.ModelTarget(OLD)})


def test_a_signed_document_verifies_and_round_trips() -> None:
    key = Ed25519PrivateKey.generate()
    desired, key_id = p.verify_desired(p.sign_desired(_doc(), key), [key.public_key()])
    assert desired == _doc() and len(key_id) == 16


@pytest.mark.parametrize("tamper, reason", [
    (lambda env: env.pop("signature"), "unsigned"),
    (lambda env: env["document"].update(revision=99), "bad-signature"),
    (lambda env: env.update(document={"kind": "x"}), "bad-signature"),
])
def test_tampered_documents_are_refused(tamper, reason) -> None:  # type: ignore[no-untyped-def]
    key = Ed25519PrivateKey.generate()
    envelope = json.loads(p.sign_desired(_doc(), key))
    tamper(envelope)
    with pytest.raises(p.FleetProtocolError) as err:
        p.verify_desired(json.dumps(envelope).encode(), [key.public_key()])
    assert err.value.reason == reason


def test_another_key_and_oversized_documents_are_refused() -> None:
    signed = p.sign_desired(_doc(), Ed25519PrivateKey.generate())
    with pytest.raises(p.FleetProtocolError) as err:
        p.verify_desired(signed, [Ed25519PrivateKey.generate().public_key()])
    assert err.value.reason == "untrusted-key"
    with pytest.raises(p.FleetProtocolError) as err:
        p.verify_desired(b" " * (p.MAX_DOCUMENT_BYTES + 1), [])
    assert err.value.reason == "too-large"


def test_revisions_only_grow_but_the_same_document_is_welcome_again() -> None:
    p.check_revision(_doc(4), 3, "x", "y")
    p.check_revision(_doc(3), 3, "same", "same")
    for revision, digest in ((3, "other"), (2, "same")):
        with pytest.raises(p.FleetProtocolError) as err:
            p.check_revision(_doc(revision), 3, "same", digest)
        assert err.value.reason == "stale-revision"


def test_wave_membership_is_stable_and_grows_with_the_percentage() -> None:
    ids = [f"agent-{i}" for i in range(1000)]
    in_10 = {a for a in ids if p.in_wave("cams", a, 10.0)}
    in_50 = {a for a in ids if p.in_wave("cams", a, 50.0)}
    assert in_10 < in_50 and 50 < len(in_10) < 150 and 400 < len(in_50) < 600
    assert p.wave_bucket("cams", "agent-1") == p.wave_bucket("cams", "agent-1")
    assert len({a for a in ids if p.in_wave("cams", a,
                                            p.percent_for_count("cams", ids, 1))}) == 1
    assert _doc(percent=0.0).targets_for("agent-1")["mlp"].ref == OLD
    assert _doc(percent=100.0).targets_for("agent-1")["mlp"].ref == REF


def test_names_and_broker_urls() -> None:
    for bad in ("", "a/b", "+", "#", "a b", "-x"):
        with pytest.raises(ValueError):
            p.check_name("group", bad)
    assert str(p.parse_broker_url("mqtts://broker.example")) == "mqtts://broker.example:8883"
    assert p.parse_broker_url("mqtt://127.0.0.1:1999").port == 1999
    with pytest.raises(ValueError, match="plaintext"):
        p.parse_broker_url("mqtt://broker.example")
    assert not p.parse_broker_url("mqtt://broker.example", allow_plaintext=True).tls
    with pytest.raises(ValueError, match="mqtts://"):
        p.parse_broker_url("http://broker.example")
    with pytest.raises(p.FleetProtocolError, match="pinned by digest"):
        p.Desired.from_json({**_doc().to_json(), "models": {"mlp": {"ref": "oci://h/r:1"}}})


def test_the_fleet_table(tmp_path: Path) -> None:
    assert fleet_section({}, tmp_path).broker is None
    cfg = fleet_section({"fleet": {"broker": "mqtts://b:8883", "group": "cams",
                                   "keepalive_s": 10}}, tmp_path)
    assert cfg.group == "cams" and cfg.keepalive_s == 10 and cfg.metrics_interval_s == 60.0
    for table, match in (({"group": "cams"}, "fleet.broker"),
                         ({"broker": "mqtts://b"}, "fleet.group"),
                         ({"broker": "mqtts://b", "group": "g", "username": "u"},
                          "password_file"),
                         ({"broker": "mqtts://b", "group": "g", "ca_file": "none.pem"},
                          "not a file"),
                         ({"broker": "mqtts://b", "group": "g", "typo": 1}, "unknown"),
                         ({"broker": "mqtts://b", "group": "g", "retry_initial_s": 0},
                          "out of range"),
                         ({"broker": "mqtts://b", "group": "g", "retry_initial_s": 60,
                           "retry_max_s": 30}, "retry_max_s")):
        with pytest.raises(ConfigError, match=match):
            fleet_section({"fleet": table}, tmp_path)


def test_a_failed_deploy_backs_off_doubling_up_to_the_maximum(tmp_path: Path) -> None:
    from edge_agent.fleet.member import backoff_s

    cfg = fleet_section({"fleet": {"broker": "mqtts://b", "group": "g"}}, tmp_path)
    assert (cfg.retry_initial_s, cfg.retry_max_s) == (30.0, 900.0)
    delays = [backoff_s(n, cfg.retry_initial_s, cfg.retry_max_s) for n in range(1, 10)]
    assert delays == [30, 60, 120, 240, 480, 900, 900, 900, 900]
    assert backoff_s(10_000, 30, 900) == 900  # no overflow however long it keeps failing
    status = p.ModelStatus("oci://h/r@sha256:" + "a" * 64, "failed", None, "unreachable",
                           retry_at=1764650042.5, attempts=3).to_json()
    assert (status["retry_at"], status["attempts"]) == (1764650042.5, 3)
    assert "retry_at" not in p.ModelStatus("oci://h/r@sha256:" + "a" * 64, "ok", 2).to_json()


def test_the_serve_flags_lay_over_the_table(tmp_path: Path) -> None:
    from edge_agent.config import load_config

    toml = tmp_path / "agent.toml"
    toml.write_text('[fleet]\nbroker = "mqtts://file:8883"\ngroup = "from-file"\n'
                    "keepalive_s = 12\n")
    cfg = load_config(toml, state_dir=tmp_path, fleet={"broker": "mqtt://127.0.0.1:1999",
                                                       "group": None}).fleet
    assert (cfg.broker, cfg.group, cfg.keepalive_s) == ("mqtt://127.0.0.1:1999", "from-file",
                                                        12)
    with pytest.raises(ConfigError, match=r"fleet\.group"):
        load_config(None, state_dir=tmp_path, fleet={"broker": "mqtts://b"})
