"""Which agent answers at which address, as learned from its GetInfo: ``agent_names`` beside
``known_agents`` (``HOST:PORT NAME ID`` a line).

``[tokens]`` may key tokens by an agent's name or id, but a command given ``--agent HOST:PORT``
knows neither. Without this file the console had to try each named token against the address
until one worked, and every wrong one is a failed authentication in the agent's log (and
counts toward its slow-down of the address). Once an agent has answered, its name and id are
remembered here and the right token is chosen at once; a name-keyed token is tried blindly only
against an address never seen before.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass
from pathlib import Path

FILE_NAME = "agent_names"


@dataclass(frozen=True, slots=True)
class SeenAgent:
    """The agent last seen answering at ``address``."""

    address: str
    name: str
    agent_id: str


class AgentNames:
    """The remembered addresses (read afresh on every lookup; writes are locked)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def lookup(self, address: str) -> SeenAgent | None:
        """The agent last seen at ``address``, if any (a missing or unreadable file: none)."""
        try:
            lines = self.path.read_text().splitlines()
        except OSError:
            return None
        for line in reversed(lines):
            parts = line.split()
            if len(parts) == 3 and parts[0] == address:
                return SeenAgent(*parts)
        return None

    def remember(self, address: str, name: str, agent_id: str) -> None:
        """Record that ``name`` (``agent_id``) answers at ``address``. Best effort: a file that
        cannot be written only means the next command tries the named tokens again."""
        if not name or not agent_id or any(c.isspace() for c in name + agent_id + address):
            return
        seen = self.lookup(address)
        if seen is not None and (seen.name, seen.agent_id) == (name, agent_id):
            return
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            with os.fdopen(fd, "r+") as f:
                fcntl.flock(f, fcntl.LOCK_EX)
                kept = [ln for ln in f.read().splitlines() if ln.split()[:1] != [address]]
                f.seek(0)
                f.truncate()
                f.write("".join(f"{ln}\n" for ln in [*kept, f"{address} {name} {agent_id}"]))
        except OSError:
            return
