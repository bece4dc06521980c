"""Fleets beyond one LAN (docs/fleet.md): the agent connects out to an MQTT broker, converges
on a signed desired state and reports its status there.

:mod:`.protocol` is the wire contract (topics, documents, signatures, wave membership), pure
and shared with the console; :mod:`.member` is the agent's side (the MQTT client, imported
only when ``[fleet] broker`` is set). The serving core knows nothing of either.
"""
