"""TLS by default on the management API: the agent's own certificate, pinned by the console on
first contact (known_agents), a swapped certificate refused, plaintext only when both sides say
--insecure, the fingerprint in `edge-agent token` and in the mDNS advert. Real agents, real TLS,
real edge-console and edge-agent subprocesses."""

from __future__ import annotations

import asyncio
import io
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from console.config import ConsoleSettings
from console.connections import Connections
from console.discovery import AgentBrowser
from console.errors import ConsoleConfigError
from console.fleet import AgentState, Fleet, FleetAgent
from console.known_agents import KnownAgents, ask_on_terminal
from console.screens.details import detail_rows
from edge_agent.client.agent_client import (
    AgentClient,
    CertificateChangedError,
    ManagementError,
    PinnedTls,
    TransportMismatchError,
)
from edge_agent.config import (
    DiscoveryConfig,
    ManagementConfig,
    ManagementSections,
    management_sections,
)
from edge_agent.discovery import AgentAdvert
from edge_agent.errors import ConfigError
from edge_agent.management.tls import fingerprint
from tests.support.eventually import eventually
from tests.support.harness import AgentProcess, InProcessAgent, sections, start_agent

ROOT = Path(__file__).resolve().parents[2]


def _options(*, address: str = "127.0.0.1:0", **kw: Any) -> ManagementSections:
    return ManagementSections(management=ManagementConfig(address=address, **kw),
                              discovery=DiscoveryConfig(enabled=False))


@pytest.fixture
def tls_agent(tmp_path: Path) -> Iterator[InProcessAgent]:
    agent = start_agent(tmp_path / "state", _options(name="tls-agent"), workers=4, tls=True)
    try:
        yield agent
    finally:
        agent.stop()


def _run(module: str, *args: str, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    if home is not None:
        env["XDG_CONFIG_HOME"] = str(home)
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False,
                          stdin=subprocess.DEVNULL)


def _status(agent: InProcessAgent, home: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    home.mkdir(exist_ok=True)
    token = home / "agent.token"
    token.write_text(agent.token + "\n")
    return _run("console.cli", "status", "--agent", agent.management, "--token-file",
                str(token), "--json", *flags, home=home)


def test_first_contact_pins_the_certificate(tls_agent: InProcessAgent, tmp_path: Path) -> None:
    home = tmp_path / "home"
    known = home / "edge-console" / "known_agents"
    refused = _status(tls_agent, home)  # a script (no terminal), no --accept-new
    assert refused.returncode == 1
    assert "is not known yet" in refused.stderr and tls_agent.fingerprint in refused.stderr
    assert "--accept-new" in refused.stderr and not known.exists()

    accepted = _status(tls_agent, home, "--accept-new")
    assert accepted.returncode == 0, accepted.stderr
    assert '"name": "tls-agent"' in accepted.stdout
    (line,) = known.read_text().splitlines()
    assert line.split()[:2] == [tls_agent.management, tls_agent.fingerprint]
    assert known.stat().st_mode & 0o777 == 0o600

    again = _status(tls_agent, home)  # pinned: no flag needed any more
    assert again.returncode == 0, again.stderr
    assert len(known.read_text().splitlines()) == 1


def test_a_swapped_certificate_is_refused(tmp_path: Path) -> None:
    state, home = tmp_path / "state", tmp_path / "home"
    first = start_agent(state, _options(name="swap"), workers=4, tls=True)
    known = home / "edge-console" / "known_agents"
    tui = Connections(ConsoleSettings(default_token=first.token, known_agents=known,
                                      discovery=False))
    try:
        address, old = first.management, first.fingerprint
        assert _status(first, home, "--accept-new").returncode == 0
        host, port = address.rsplit(":", 1)
        row = FleetAgent(key=address, name="swap", host=host, port=int(port))
        assert tui.probe(row).state is AgentState.ONLINE  # the TUI holds a pinned channel
    finally:
        first.stop()
    shutil.rmtree(state / "tls")  # a new identity on the same address (or an impostor)
    second = start_agent(state, _options(name="swap", address=address), workers=4, tls=True)
    try:
        assert second.management == address and second.fingerprint != old
        before = known.read_text()
        run = _status(second, home, "--accept-new")  # --accept-new never overrides a pin
        assert run.returncode == 1
        assert "AGENT IDENTIFICATION HAS CHANGED" in run.stderr
        assert old in run.stderr and second.fingerprint in run.stderr
        assert f"remove line 1 of {known}" in run.stderr and "edge-agent token" in run.stderr
        assert known.read_text() == before
        with pytest.raises(CertificateChangedError, match="CHANGED"):  # the library too
            AgentClient(address, token=second.token, tls=PinnedTls(old))
        probed = tui.probe(row)  # the TUI's open channel reconnects to the new certificate
        assert probed.state is AgentState.UNREACHABLE
        assert "AGENT IDENTIFICATION HAS CHANGED" in probed.message
        assert f"remove line 1 of {known}" in probed.message
    finally:
        tui.close()
        second.stop()


def test_plaintext_only_when_both_sides_opt_in(tls_agent: InProcessAgent,
                                              tmp_path: Path) -> None:
    home = tmp_path / "home"
    run = _status(tls_agent, home, "--insecure")
    assert run.returncode == 1
    assert "requires TLS" in run.stderr and "drop --insecure" in run.stderr

    plain = start_agent(tmp_path / "plain", _options(name="plain"), workers=4)  # --insecure
    try:
        run = _status(plain, home, "--accept-new")
        assert run.returncode == 1
        assert "serves plaintext" in run.stderr and "--insecure" in run.stderr
        assert not (home / "edge-console" / "known_agents").exists()
        run = _status(plain, home, "--insecure")
        assert run.returncode == 0, run.stderr
        assert '"name": "plain"' in run.stdout
    finally:
        plain.stop()


def test_token_prints_the_fingerprint_the_agent_serves(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    token = _run("edge_agent.cli", "token", "--state-dir", str(state))  # before the first start
    assert token.returncode == 0, token.stderr
    printed = token.stderr.split("certificate fingerprint ")[1].split()[0]
    assert printed == fingerprint((state / "tls" / "cert.pem").read_bytes())
    assert token.stdout.strip() == (state / "management.token").read_text().strip()
    assert (state / "tls").stat().st_mode & 0o777 == 0o700
    for name in ("cert.pem", "key.pem"):
        assert (state / "tls" / name).stat().st_mode & 0o777 == 0o600
    only = _run("edge_agent.cli", "token", "--state-dir", str(state), "--fingerprint")
    assert only.stdout.strip() == printed

    with AgentProcess(state, tls=True) as agent:  # reuses the certificate
        assert printed in "".join(agent.output)  # the ready line shows it
        with agent.client() as client:
            assert client.info().name == "test-agent"
        assert agent.fingerprint == printed


def test_serve_refuses_insecure_with_tls_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--insecure"):
        management_sections({"management": {"tls_cert": "a.pem", "tls_key": "a.key"}},
                           tmp_path, insecure=True)
    opts = management_sections({"management": {"tls_client_ca": "ca.pem"}}, tmp_path)
    assert opts.management.tls is None and opts.management.client_ca == tmp_path / "ca.pem"


def test_mdns_advert_carries_the_fingerprint(tmp_path: Path) -> None:
    agent = start_agent(tmp_path / "state", sections(
        "advertised", watch_window_s=60.0, mdns_interfaces=("127.0.0.1",)),
        workers=4, tls=True)

    assert agent.runtime is not None and agent.runtime.management is not None
    agent_id = agent.runtime.management.identity.agent_id

    async def find() -> FleetAgent:
        async with AgentBrowser(interfaces=["127.0.0.1"]) as browser:
            for _ in range(600):  # up to 60 s on a busy machine
                mine = [a for a in browser.agents() if a.id == agent_id]
                if mine:
                    assert mine[0].txt["fp"] == mine[0].fingerprint
                    fleet = Fleet()
                    from console.discovery import DiscoveryEvent

                    fleet.apply_discovery(DiscoveryEvent("added", mine[0]))
                    return fleet.agents()[0]
                await asyncio.sleep(0.1)
        raise AssertionError("the agent was not discovered")

    try:
        found = asyncio.run(find())
        assert found.fingerprint == agent.fingerprint
        assert ("certificate (mDNS)", agent.fingerprint) in detail_rows(found, 0.0)  # TUI `d`
    finally:
        agent.stop()
    plain = AgentAdvert(id="x", name="x", arch="x86_64", profile="p", mgmt_port=1, grpc_port=2)
    assert plain.txt()["tls"] == "off" and "fp" not in plain.txt()


def test_the_tui_connections_pin_and_show_the_certificate(tls_agent: InProcessAgent,
                                                          tmp_path: Path) -> None:
    known = tmp_path / "known_agents"
    host, port = tls_agent.management.rsplit(":", 1)
    row = FleetAgent(key=tls_agent.management, name="x", host=host, port=int(port))
    settings = ConsoleSettings(default_token=tls_agent.token, known_agents=known,
                               discovery=False)
    conns = Connections(settings)
    try:
        result = conns.probe(row)
        assert result.state is AgentState.UNREACHABLE  # not trusted yet: says how
        assert tls_agent.fingerprint in result.message and "--accept-new" in result.message
    finally:
        conns.close()
    asked: list[str] = []

    def yes(address: str, fp: str, path: Path) -> bool:
        asked.append(fp)
        return True

    conns = Connections(replace(settings, ask_new=yes))
    try:
        result = conns.probe(row)
        assert result.state is AgentState.ONLINE, result.message
        assert asked == [tls_agent.fingerprint]
        assert result.details is not None
        assert result.details["connection"] == f"TLS, pinned certificate {asked[0]}"
        assert KnownAgents(known).lookup(tls_agent.management) is not None
    finally:
        conns.close()


def test_terminal_question_and_a_damaged_file(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("maybe\nyes\n"))
    assert ask_on_terminal("10.0.0.7:50051", "SHA256:AB", tmp_path / "k") is True
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert ask_on_terminal("10.0.0.7:50051", "SHA256:AB", tmp_path / "k") is False
    bad = tmp_path / "known_agents"
    bad.write_text("# comment\n10.0.0.7:50051 not-a-fingerprint\n")
    with pytest.raises(ConsoleConfigError, match="line 2"):
        KnownAgents(bad).lookup("10.0.0.7:50051")


def test_library_client_names_the_side_to_change(tls_agent: InProcessAgent) -> None:
    with AgentClient(tls_agent.management, token=tls_agent.token) as plain, \
            pytest.raises(TransportMismatchError, match="requires TLS"):
        plain.info()


def test_mtls_with_the_agents_own_certificate(tmp_path: Path) -> None:
    """tls_client_ca alone: the self-signed (pinned) server certificate plus client
    certificates; the console's [tls] cert/key without a CA pins and presents its certificate."""
    from tests.agent_management.test_mtls import _ca, _leaf

    ca = _ca(tmp_path, "fleet-ca")
    _leaf(tmp_path, "console", ca)
    agent = start_agent(tmp_path / "state", _options(name="mtls-pinned",
                                                     client_ca=tmp_path / "fleet-ca.pem"),
                        workers=4)
    try:
        config = tmp_path / "console.toml"
        config.write_text(f'[tls]\ncert = "{tmp_path}/console.pem"\n'
                          f'key = "{tmp_path}/console.key"\n')
        home = tmp_path / "home"
        home.mkdir()
        run = _run("console.cli", "status", "--agent", agent.management, "--json",
                   "--accept-new", "--config", str(config), home=home)
        assert run.returncode == 0, run.stderr
        assert '"name": "mtls-pinned"' in run.stdout
        with AgentClient(agent.management, tls=PinnedTls(agent.fingerprint), timeout_s=5) as c, \
                pytest.raises(ManagementError):  # no client certificate: no answer
            c.info()
    finally:
        agent.stop()


def test_first_contact_on_a_terminal_asks(tls_agent: InProcessAgent, tmp_path: Path) -> None:
    """`edge-console status` with a terminal: the fingerprint is shown, `yes` pins it."""
    import pty
    import select

    home = tmp_path / "home"
    home.mkdir()
    token = home / "agent.token"
    token.write_text(tls_agent.token + "\n")
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "console.cli", "status", "--agent", tls_agent.management,
         "--token-file", str(token), "--json"], cwd=ROOT, stdin=slave, stderr=slave,
        stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "XDG_CONFIG_HOME": str(home)})
    os.close(slave)
    try:
        read: list[bytes] = []

        def prompted() -> bool:
            assert proc.poll() is None, b"".join(read)
            if select.select([master], [], [], 0.5)[0]:
                read.append(os.read(master, 4096))
            return b"(yes/no)?" in b"".join(read)

        eventually(prompted, timeout=120, interval=0,
                   message=lambda: f"no (yes/no)? prompt: {b''.join(read)!r}")
        seen = b"".join(read)
        assert tls_agent.fingerprint.encode() in seen
        os.write(master, b"yes\n")
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        os.close(master)
    assert proc.returncode == 0 and '"name": "tls-agent"' in out
    assert KnownAgents(home / "edge-console" / "known_agents").lookup(tls_agent.management)
