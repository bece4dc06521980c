"""The agent's identity: a stable id (created once in the state dir), name, host, start time."""

from __future__ import annotations

import os
import socket
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from edge_agent.errors import StateStoreError

ID_FILE = "agent-id"


def load_or_create_agent_id(state_dir: str | os.PathLike[str]) -> str:
    """The agent id stored in ``STATE_DIR/agent-id``, created (a random UUID) on first start."""
    path = Path(state_dir) / ID_FILE
    try:
        if path.is_file():
            found = path.read_text().strip()
            if found:
                return found
        new = uuid.uuid4().hex
        tmp = path.with_name(f".{ID_FILE}.{os.getpid()}")
        tmp.write_text(new + "\n")
        os.replace(tmp, path)
        return new
    except OSError as exc:
        raise StateStoreError(f"cannot read or create the agent id {path}: "
                              f"{exc.strerror or exc}") from exc


@dataclass(frozen=True)
class AgentIdentity:
    """Who the agent is, for GetInfo and the mDNS advert."""

    agent_id: str
    name: str
    host: str = field(default_factory=socket.gethostname)
    started_monotonic: float = field(default_factory=time.monotonic)
    inference_address: str = ""

    @property
    def uptime_s(self) -> float:
        """Seconds since the agent started."""
        return time.monotonic() - self.started_monotonic
