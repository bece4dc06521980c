"""Fixtures: real bundles (once per session), real agents on loopback (stopped by the test),
and the console app factory."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from textual.pilot import Pilot

from console.app import EdgeConsoleApp
from console.config import ConsoleSettings
from tests.console_tui.agents import BundleSet, RunningAgent, build_test_bundles, start_agent
from tests.support.eventually import eventually_async

LOOPBACK = ("127.0.0.1",)
DEADLINE_S = 30.0


@pytest.fixture(scope="session")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> BundleSet:
    return build_test_bundles(tmp_path_factory.mktemp("console-bundles"))


@pytest.fixture
def agents(tmp_path: Path, bundles: BundleSet) -> Iterator[Callable[..., RunningAgent]]:
    """``agents(name, mdns=True)`` starts a real agent; every one is stopped at the end."""
    started: list[RunningAgent] = []

    def start(name: str, **kw: object) -> RunningAgent:
        agent = start_agent(tmp_path / "agents", name, bundles.public_key, **kw)  # type: ignore[arg-type]
        started.append(agent)
        return agent

    yield start
    for agent in started:
        agent.stop()


def console_app(*, tokens: dict[str, str] | None = None, discovery: bool = True,
                poll: bool = True, **kw: object) -> EdgeConsoleApp:
    """The console as the tests run it: mDNS on 127.0.0.1 only, fast polls."""
    kw.setdefault("interfaces", LOOPBACK)
    kw.setdefault("insecure", True)  # the agents run with --insecure (tests/console_tui/agents)
    settings = ConsoleSettings(tokens=tokens or {}, discovery=discovery, poll_interval_s=0.3,
                               canary_soak_s=1.0, **kw)  # type: ignore[arg-type]
    return EdgeConsoleApp(settings, poll=poll)


async def wait_for(pilot: Pilot[None], condition: Callable[[], object], what: str,
                   deadline_s: float = DEADLINE_S, *,
                   shown: Callable[[], str] | None = None) -> None:
    """Let the app run until ``condition()`` holds (fails after a generous deadline; the
    failure adds ``shown()``, e.g. the text a widget shows then)."""
    loop = asyncio.get_running_loop()
    start = loop.time()

    def message() -> str:
        return f"timed out waiting for {what}" + (f"; shown: {shown()!r}" if shown else "")

    await eventually_async(condition, timeout=deadline_s, sleep=pilot.pause, message=message)
    if os.environ.get("CONSOLE_TEST_TIMING"):
        print(f"waited {loop.time() - start:.2f}s for {what}")
