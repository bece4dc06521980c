"""The running agent's lifecycle: systemd notifications from a real agent process, SIGTERM
exits cleanly, and the mDNS advert (127.0.0.1 only) appears on start and is withdrawn on stop."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
from pathlib import Path

import pytest

from console.discovery import AgentBrowser
from edge_agent.client.agent_client import AgentClient
from tests.support.bundles import Bundles
from tests.support.eventually import eventually, eventually_async
from tests.support.harness import AgentProcess, sections, start_agent


def _datagrams(sock: socket.socket, until: str, deadline_s: float = 60.0) -> list[str]:
    got: list[str] = []

    def received() -> bool:  # one datagram (the socket's own timeout bounds the wait)
        with contextlib.suppress(TimeoutError):
            got.append(sock.recv(4096).decode())
        return any(until in m for m in got)

    eventually(received, timeout=deadline_s, interval=0,
               message=lambda: f"no {until!r} from the agent; got {got}")
    return got


def test_systemd_ready_watchdog_stopping_and_sigterm_exit_0(bundles: Bundles,
                                                            tmp_path: Path) -> None:
    path = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        sock.settimeout(0.5)
        agent = AgentProcess(tmp_path / "state", trust=bundles.public_key,
                             env={"NOTIFY_SOCKET": str(path), "WATCHDOG_USEC": "400000"})
        agent.start()
        try:
            messages = _datagrams(sock, "READY=1")
            ready = next(m for m in messages if "READY=1" in m)
            assert "STATUS=serving 0 model(s)" in ready
            assert "WATCHDOG=1" in _datagrams(sock, "WATCHDOG=1")[-1]
            assert agent.proc is not None
            os.killpg(agent.proc.pid, signal.SIGTERM)
            assert any("STOPPING=1" in m for m in _datagrams(sock, "STOPPING=1"))
            assert agent.proc.wait(60) == 0
        finally:
            agent.kill()


async def _wait_for(browser: AgentBrowser, present: bool, name: str, timeout: float) -> None:
    await eventually_async(lambda: any(a.name == name for a in browser.agents()) == present,
                           timeout=timeout, interval=0.1,
                           message=f"agent {name} {'never appeared' if present else 'never left'}")


@pytest.mark.asyncio
async def test_mdns_advert_on_start_withdrawn_on_stop(bundles: Bundles, tmp_path: Path) -> None:
    options = sections("mdns-agent", bundles.public_key, mdns_interfaces=("127.0.0.1",))
    async with AgentBrowser(interfaces=["127.0.0.1"]) as browser:
        agent = await asyncio.to_thread(start_agent, tmp_path / "state", options, workers=4)
        try:
            await _wait_for(browser, True, "mdns-agent", 30)
            seen = next(a for a in browser.agents() if a.name == "mdns-agent")
            assert seen.port == int(agent.management.rpartition(":")[2])
            assert seen.grpc_port == int(agent.grpc.rpartition(":")[2])
            assert seen.api == "1" and seen.arch == "x86_64"
            with AgentClient(agent.management, token=agent.token) as client:
                assert (await asyncio.to_thread(client.deploy, bundles.mlp[1])).ok

            def txt_follows() -> bool:  # the TXT record follows the active versions
                agents = [a for a in browser.agents() if a.name == "mdns-agent"]
                return bool(agents) and agents[0].txt.get("models") == "mlp:1"

            await eventually_async(
                txt_follows, timeout=30, interval=0.1,
                message=lambda: f"TXT models never became mlp:1: {browser.agents()}")
        finally:
            await asyncio.to_thread(agent.stop)
        await _wait_for(browser, False, "mdns-agent", 30)
