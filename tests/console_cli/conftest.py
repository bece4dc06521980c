"""Two real agents (in-process threads, management over TLS on 127.0.0.1 port 0; one
advertised over mDNS on 127.0.0.1 only); the runner for edge-console subprocesses is in
tests/support/cli.py.

The consoles find both agents' certificates pinned in ``HOME/edge-console/known_agents`` (as an
operator's console would after the first contact), so every subcommand here runs over TLS."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.bundles import Bundles, build_all
from tests.support.cli import ROOT, Run, console  # noqa: F401  (re-exported)
from tests.support.harness import InProcessAgent, sections, start_agent


@pytest.fixture(scope="session")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> Bundles:
    return build_all(tmp_path_factory.mktemp("console-bundles"))


@dataclass
class Fleet:
    a: InProcessAgent  # advertised on 127.0.0.1
    b: InProcessAgent  # not advertised
    token_a: Path
    token_b: Path
    home: Path  # XDG_CONFIG_HOME for the console subprocesses


@pytest.fixture(scope="module")
def fleet(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    root = tmp_path_factory.mktemp("fleet")
    a = start_agent(root / "a", sections("agent-a", bundles.public_key,
                                         mdns_interfaces=("127.0.0.1",)), workers=4, tls=True)
    try:
        b = start_agent(root / "b", sections("agent-b", bundles.public_key), workers=4, tls=True)
    except BaseException:
        a.stop()
        raise
    try:
        token_a, token_b = root / "a.token", root / "b.token"
        token_a.write_text(a.token + "\n")
        token_b.write_text(b.token + "\n")
        home = root / "home"
        (home / "edge-console").mkdir(parents=True)
        (home / "edge-console" / "known_agents").write_text(
            f"{a.management} {a.fingerprint} agent-a\n{b.management} {b.fingerprint} agent-b\n")
        yield Fleet(a, b, token_a, token_b, home)
    finally:
        b.stop()
        a.stop()
