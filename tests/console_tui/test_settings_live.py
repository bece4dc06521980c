"""The agent screen's live settings action (S) against a real agent: the modal shows the
model's settings, a malformed line is refused in place, and applying changes the agent's
live settings (a committed "settings" deployment); the screen shows the last tuning run."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from textual.widgets import TextArea

from console.config import StaticAgent
from console.errors import ConsoleError
from console.fleet import AgentState
from console.screens.agent import AgentScreen
from console.screens.settings import SettingsScreen, parse_settings_text
from edge_agent.client.agent_client import AgentClient
from tests.console_tui.agents import BundleSet, RunningAgent
from tests.console_tui.conftest import console_app, wait_for


def test_settings_text_parsing_skips_comments_and_names_bad_lines() -> None:
    assert parse_settings_text("instances = 2\n# threads = 1\n\nisolation=thread\n") == {
        "instances": "2", "isolation": "thread"}
    with pytest.raises(ConsoleError, match="line 2"):
        parse_settings_text("instances = 2\noops\n")


async def test_settings_modal_applies_live_settings(
        agents: Callable[..., RunningAgent], bundles: BundleSet) -> None:
    alpha = agents("alpha", mdns=False)
    with AgentClient(alpha.address, token=alpha.token) as c:
        assert c.deploy(bundles.mlp[1]).ok
        c.record_tuning("mlp", "best: instances=2 at 900 infer/s", {"candidates": []})
    app = console_app(discovery=False, tokens={alpha.address: alpha.token},
                      agents=(StaticAgent("127.0.0.1", int(alpha.address.rsplit(":")[1]),
                                          alpha.name),))
    async with app.run_test(size=(150, 45)) as pilot:
        await wait_for(pilot, lambda: app.fleet.find("alpha").state is AgentState.ONLINE,
                       "alpha online")
        await pilot.press("enter")
        screen = app.screen
        assert isinstance(screen, AgentScreen)
        await wait_for(pilot, lambda: screen.snapshot.models() == ["mlp"], "versions listed")
        assert "last tuning of mlp: best: instances=2" in str(
            screen.query_one("#agent-summary").render())
        await pilot.press("S")
        await wait_for(pilot, lambda: isinstance(app.screen, SettingsScreen), "the modal", 60)
        modal = app.screen
        area = modal.query_one("#settings-text", TextArea)
        assert "# instances = " in area.text
        area.text = "instances = \n"
        await pilot.press("ctrl+s")
        assert isinstance(app.screen, SettingsScreen)  # refused in place, nothing sent
        assert "line 1" in str(modal.query_one("#settings-error").render())
        area.text = "instances = 2\nmax_queue_delay_us = 250\n"
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: isinstance(app.screen, AgentScreen), "modal closed")
        await wait_for(pilot, lambda: any(d.kind == "settings" and d.status == "committed"
                                          for d in screen.snapshot.deployments),
                       "the settings change in the history", 90)
    with AgentClient(alpha.address, token=alpha.token) as c:
        live = {s.key: s.value for s in c.model_settings("mlp") if s.source == "live"}
    assert live == {"instances": "2", "max_queue_delay_us": "250"}
