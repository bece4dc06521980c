"""A hostile fleet broker (issue 30, docs/fleet.md): whoever controls the broker floods the
agent's group with desired states it must refuse: unsigned, signed by a key it does not
trust, altered after signing, not JSON, and over the 64 KiB limit.

Nothing may be deployed (the soak's serving checks hold) and the agent must not echo the
flood: its status reports are counted (``status-reports``; the agent reports a new refusal at
most every 30 s, so a few per minute at most). The agent has to follow this attack's broker:
start it with :data:`AGENT_ARGS` (the broker's port is fixed when this module is imported;
``EDGE_FLEET_BROKER_PORT`` sets it). Bounded: about 100 documents a second, the broker stopped
on return.
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

from benchmarks.attacks import Tally, Target, fixed_port

PORT = fixed_port("EDGE_FLEET_BROKER_PORT")
GROUP = "soak-fleet"
AGENT_ARGS = ["--fleet-broker", f"mqtt://127.0.0.1:{PORT}", "--fleet-group", GROUP]
"""``edge-agent serve`` flags that make the agent follow this attack's broker."""
PAUSE_S = 0.01
REF = "oci://127.0.0.1:1/evil/mlp@sha256:" + "e" * 64


def _forgeries() -> list[bytes]:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from edge_agent.fleet import protocol as p

    doc = p.Desired(GROUP, 10**9, {"mlp": p.ModelTarget(REF)})
    signed = json.loads(p.sign_desired(doc, Ed25519PrivateKey.generate()))
    altered = dict(signed, document=dict(signed["document"], revision=10**9 + 1))
    return [json.dumps({"document": doc.to_json()}).encode(),  # unsigned
            json.dumps(signed).encode(),  # a key the agent does not trust
            json.dumps(dict(altered, key_id="")).encode(),  # altered after signing
            b"\xff not json",
            json.dumps({"document": doc.to_json(), "pad": "x" * (p.MAX_DOCUMENT_BYTES + 1),
                        "signature": base64.b64encode(b"\0" * 64).decode()}).encode()]


def attack(target: Target, stop: threading.Event, tally: Tally) -> None:
    """Publish forged desired states to the agent's group until ``stop``."""
    from edge_agent.fleet import protocol as p
    from edge_agent.fleet.link import make_client, shut
    from tests.support.mosquitto import BINARY, Mosquitto

    if BINARY is None:
        tally.add("skipped: no mosquitto")
        return
    forgeries = _forgeries()
    with tempfile.TemporaryDirectory(prefix="fleet-forgery-") as tmp:
        broker = Mosquitto(Path(tmp), port=PORT).start()
        client = make_client(f"forger-{os.getpid()}", p.parse_broker_url(broker.url))

        def counted(c: Any, u: Any, message: Any) -> None:
            if not message.retain:
                tally.add("status-reports")

        client.on_message = counted
        try:
            client.connect("127.0.0.1", PORT)
            client.subscribe(p.ALL_STATUS, 1)
            client.loop_start()
            topic, i = p.group_desired_topic(GROUP), 0
            while not stop.wait(PAUSE_S):
                client.publish(topic, forgeries[i % len(forgeries)], qos=0)
                tally.add("forged")
                i += 1
        finally:
            shut(client)
            broker.stop()
