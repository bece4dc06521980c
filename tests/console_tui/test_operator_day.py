"""Issue 28, an operator's day in the console: keys mean one thing everywhere, first-contact
prompts come one at a time and name the agent, background fetches that fail or stall say so
with their age, an 80x24 fleet reaches every column, and the smaller items (help, footer,
jump list, file picker, Tab order)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from textual.widgets import DataTable, Static
from textual.widgets._footer import FooterKey

from console.config import StaticAgent
from console.fetches import Fetches
from console.fleet import AgentState
from console.rollout.staged import Phase, TargetProgress
from console.screens.agent import AgentScreen
from console.screens.agent_log import AgentLogScreen
from console.screens.confirm import ConfirmScreen
from console.screens.deploy import DeployScreen
from console.screens.help import INTRO
from console.screens.jump import VIEWS
from console.widgets.bundle_tree import BundleTree
from console.widgets.fleet_table import FleetTable
from edge_agent.management.tls import fingerprint_of
from tests.console_tui.agents import RunningAgent
from tests.console_tui.conftest import console_app, wait_for
from tests.console_tui.test_snapshots import _app, _fill_fleet


def test_fetches_say_which_failed_or_stalled_and_how_long_ago() -> None:
    now = [1000.0]
    fetches = Fetches(clock=lambda: now[0])
    fetches.started("history (5 min)")
    now[0] += 3
    assert fetches.problems() == []  # still within the stall time
    now[0] += 9
    assert fetches.problems() == ["history (5 min): no answer for 12s"]
    fetches.failed("history (5 min)", "deadline exceeded")
    now[0] += 4
    assert fetches.problems() == ["history (5 min): failed 4s ago (1x): deadline exceeded; "
                                  "retrying"]
    fetches.answered("history (5 min)")
    assert fetches.problems() == []


async def test_q_quits_everywhere_and_warns_while_a_rollout_runs() -> None:
    app = _app()
    async with app.run_test(size=(130, 36)) as pilot:
        _fill_fleet(app)
        await app.push_screen(AgentLogScreen("id-kitchen-pi"))
        await pilot.pause()
        job = app.rollouts.add("mlp v3 to 1 agent(s)", [TargetProgress(
            "id-kitchen-pi", "kitchen-pi", canary=True)], "id-kitchen-pi")
        app.rollouts.progress(job.id, TargetProgress("id-kitchen-pi", "kitchen-pi", canary=True,
                                                     phase=Phase.SOAKING))
        await pilot.press("q")  # in the log view too: Quit (Esc is Back), here with a warning
        assert isinstance(app.screen, ConfirmScreen)
        assert "canary kitchen-pi under watch" in app.screen.question
        assert "NOT rolled back" in app.screen.question
        await pilot.press("n")
        assert isinstance(app.screen, AgentLogScreen) and app.is_running
        await pilot.press("q", "y")
        await pilot.pause()
        assert not app.is_running


async def test_trust_prompts_come_one_at_a_time_and_name_the_agent(
        agents: Callable[..., RunningAgent], tmp_path: Path) -> None:
    started = [agents(name, mdns=False, tls=True) for name in ("alpha", "beta", "gamma")]
    app = console_app(discovery=False, insecure=False, known_agents=tmp_path / "known_agents",
                      tokens={a.address: a.token for a in started},
                      agents=tuple(StaticAgent("127.0.0.1", int(a.address.rsplit(":")[1]),
                                               name) for a, name in zip(
                                                   started, ("alpha", "beta", "gamma"),
                                                   strict=True)))
    asked: list[str] = []
    async with app.run_test(size=(150, 45)) as pilot:
        for answer in ("n", "y", "y"):
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "a prompt")
            prompts = [s for s in app.screen_stack if isinstance(s, ConfirmScreen)]
            assert len(prompts) == 1  # never stacked
            question = app.screen.question  # type: ignore[attr-defined]
            name = next(n for n in ("alpha", "beta", "gamma") if f"agent {n} (" in question)
            agent = started[("alpha", "beta", "gamma").index(name)]
            assert fingerprint_of(agent.state_dir) in question
            asked.append(name)
            await pilot.press(answer)
        await wait_for(pilot, lambda: sum(a.state is AgentState.ONLINE
                                          for a in app.fleet.agents()) == 2, "two trusted")
        rounds = app.poll_rounds
        await wait_for(pilot, lambda: app.poll_rounds >= rounds + 3, "three more polls")
        assert not isinstance(app.screen, ConfirmScreen)  # the refused one is not asked again
    assert sorted(asked) == ["alpha", "beta", "gamma"]  # each asked exactly once


async def test_a_failing_agent_view_fetch_shows_its_age_and_is_retried(
        agents: Callable[..., RunningAgent]) -> None:
    alpha = agents("alpha", mdns=False)
    app = console_app(discovery=False, tokens={alpha.address: alpha.token},
                      agents=(StaticAgent("127.0.0.1", int(alpha.address.rsplit(":")[1]),
                                          "alpha"),))
    async with app.run_test(size=(150, 45)) as pilot:
        await wait_for(pilot, lambda: app.fleet.find("alpha").state is AgentState.ONLINE,  # type: ignore[union-attr]
                       "alpha online")
        app.open_agent(app.fleet.find("alpha").key)  # type: ignore[union-attr]
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, AgentScreen)
        box = screen.query_one("#agent-fetches", Static)
        await wait_for(pilot, lambda: screen.snapshot.info is not None, "the agent view data")
        assert not box.display
        alpha.stop()
        await wait_for(pilot, lambda: box.display and "agent state: failed" in str(
            box.render()), "the failed fetch shown")
        state = screen.fetches.state("agent state")
        assert state is not None
        await wait_for(pilot, lambda: screen.fetches.state("agent state").tries >= 2,  # type: ignore[union-attr]
                       "the fetch retried")
        assert "ago" in str(box.render()) and "retrying" in str(box.render())


async def test_the_80x24_fleet_reaches_last_seen_keeps_name_and_the_footer_keeps_quit(
        ) -> None:
    app = _app()
    async with app.run_test(size=(80, 24)) as pilot:
        _fill_fleet(app)
        await pilot.pause()
        table = app.screen.query_one(FleetTable)
        assert table.fixed_columns == 1  # NAME never scrolls away
        for _ in range(8):  # one column a press
            await pilot.press("right")
        assert table.max_scroll_x > 0 and table.scroll_x == table.max_scroll_x
        last = list(table.columns.values())[-1]
        assert table.virtual_size.width >= sum(c.get_render_width(table)
                                               for c in table.columns.values())
        assert str(last.label).startswith("LAST SEEN")
        keys = [k.action for k in app.screen.query(FooterKey)]
        assert keys[:3] == ["help", "jump", "quit"]  # first: a narrow footer never cuts them off


async def test_smaller_items_help_footer_jump_picker_and_tab_order(tmp_path: Path) -> None:
    assert "e events" in INTRO and "l events" not in INTRO
    assert "rollouts" in VIEWS
    assert any(b.key == "S" and b.show for b in AgentScreen.BINDINGS)  # in the agent footer
    (tmp_path / "inner").mkdir()
    app = _app()
    async with app.run_test(size=(160, 45)) as pilot:
        _fill_fleet(app)
        screen = DeployScreen(["id-kitchen-pi"], root=tmp_path / "inner")
        await app.push_screen(screen)
        await pilot.pause()
        tree = screen.query_one(BundleTree)
        tree.focus()
        await pilot.press("backspace")  # the picker goes up a folder
        assert Path(tree.path) == tmp_path
        order = []
        for _ in range(4):
            await pilot.press("tab")
            order.append(app.focused.id if app.focused else None)
        assert order == ["target-list", "soak-input", "start", "reference-input"]


async def test_details_wrap_a_long_fingerprint_instead_of_cutting_it() -> None:
    fp = "SHA256:" + ":".join(f"{i:02X}" for i in range(32))  # 102 characters
    app = _app()
    async with app.run_test(size=(80, 24)) as pilot:
        _fill_fleet(app)
        agent = replace(app.fleet.get("id-kitchen-pi"), fingerprint=fp)  # type: ignore[type-var]
        app.show_details(agent)
        await pilot.pause()
        table = app.screen.query_one("#details-table", DataTable)
        field, value = table.columns.values()
        assert field.width + value.width + 4 <= table.size.width  # every column on screen
        row = next(r for r in range(table.row_count) if table.get_row_at(r)[0].startswith(
            "certificate"))
        assert str(table.get_row_at(row)[1]) == fp
        assert table.rows[table.coordinate_to_cell_key((row, 0)).row_key].height >= 2  # wrapped


async def test_history_time_column_fits_its_stamps() -> None:
    app = _app()
    async with app.run_test(size=(80, 24)) as pilot:
        _fill_fleet(app)
        app.open_history("id-kitchen-pi")
        await pilot.pause()
        table = app.screen.query_one("#history-table", DataTable)
        time_column = next(iter(table.columns.values()))
        assert time_column.width >= len("01-15 08:00:00") and not time_column.auto_width
