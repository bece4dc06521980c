"""The console's config file: tokens (or token files) and TLS files per agent.

Default path ``~/.config/edge-console/config.toml`` (``$EDGE_CONSOLE_CONFIG`` overrides it)::

    token_file = "~/.config/edge-console/default.token"   # used when no agent entry matches

    [agents."192.168.1.20:50051"]
    token_file = "~/tokens/kitchen-pi.token"               # or: token = "..."

    [agents."10.0.0.7:50051"]
    token = "..."
    tls_ca = "ca.pem"                                       # TLS; with tls_cert/tls_key: mTLS
    tls_cert = "console.pem"
    tls_key = "console.key"

``--token-file F`` on the command line wins over the file.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from console.errors import TokenError, UsageError
from edge_agent.management.client import ClientTls

CONFIG_ENV = "EDGE_CONSOLE_CONFIG"
_AGENT_KEYS = {"token", "token_file", "tls_ca", "tls_cert", "tls_key", "tls_server_name"}


def default_config_path() -> Path:
    """Where the console looks for its config file."""
    env = os.environ.get(CONFIG_ENV)
    if env:
        return Path(env).expanduser()
    base = Path(os.environ.get("XDG_CONFIG_HOME", "~/.config")).expanduser()
    return base / "edge-console" / "config.toml"


@dataclass(frozen=True)
class AgentAccess:
    """How to talk to one agent: its token and optional TLS files."""

    token: str | None = None
    tls: ClientTls | None = None


@dataclass(frozen=True)
class ConsoleSettings:
    """The parsed config file (empty when there is none)."""

    path: Path | None = None
    default_token_file: Path | None = None
    agents: dict[str, dict[str, Any]] = field(default_factory=dict)

    def access(self, target: str, token_file: Path | None = None) -> AgentAccess:
        """Token and TLS for ``target`` (HOST:PORT); ``token_file`` overrides the config."""
        entry = self.agents.get(target, {})
        tls = None
        if entry.get("tls_ca"):
            tls = ClientTls(ca=self._path(entry["tls_ca"]),
                            cert=self._path(entry["tls_cert"]) if entry.get("tls_cert") else None,
                            key=self._path(entry["tls_key"]) if entry.get("tls_key") else None,
                            server_name=entry.get("tls_server_name"))
        if token_file is not None:
            return AgentAccess(read_token(token_file), tls)
        if entry.get("token"):
            return AgentAccess(str(entry["token"]), tls)
        if entry.get("token_file"):
            return AgentAccess(read_token(self._path(entry["token_file"])), tls)
        if self.default_token_file is not None:
            return AgentAccess(read_token(self.default_token_file), tls)
        return AgentAccess(None, tls)

    def _path(self, value: str) -> Path:
        p = Path(value).expanduser()
        if not p.is_absolute() and self.path is not None:
            p = self.path.parent / p
        return p


def read_token(path: Path) -> str:
    """The token in ``path`` (one line)."""
    try:
        token = Path(path).expanduser().read_text().strip()
    except OSError as exc:
        raise TokenError(f"cannot read the token file {path}: {exc.strerror}") from None
    if not token:
        raise TokenError(f"the token file {path} is empty; on the agent run "
                         "`edge-agent token --state-dir DIR` and save its output there")
    return token


def load_settings(path: Path | None = None) -> ConsoleSettings:
    """Read the console config (``path``, else the default path if it exists)."""
    explicit = path is not None
    path = Path(path).expanduser() if path is not None else default_config_path()
    if not path.exists():
        if explicit:
            raise UsageError(f"console config {path} does not exist")
        return ConsoleSettings()
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"console config {path} cannot be read: {exc}") from None
    unknown = set(data) - {"token_file", "agents"}
    if unknown:
        raise UsageError(f"console config {path}: unknown key {sorted(unknown)[0]!r} "
                         "(known: token_file, agents)")
    agents = data.get("agents", {})
    if not isinstance(agents, dict):
        raise UsageError(f"console config {path}: 'agents' must be a table of HOST:PORT tables")
    for target, entry in agents.items():
        bad = set(entry) - _AGENT_KEYS if isinstance(entry, dict) else {"(not a table)"}
        if bad:
            raise UsageError(f"console config {path}: agents.{target!r} has unknown key "
                             f"{sorted(bad)[0]!r} (known: {', '.join(sorted(_AGENT_KEYS))})")
    settings = ConsoleSettings(path=path, agents=agents)
    if data.get("token_file"):
        settings = ConsoleSettings(path=path, agents=agents,
                                   default_token_file=settings._path(data["token_file"]))
    return settings
