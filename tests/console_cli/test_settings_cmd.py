"""``edge-console settings MODEL``: show, change, unset and revert a model's live settings on a
real agent; bad input is one line on stderr, exit 1, and changes nothing. ``edge-console
status`` shows the last tuning run of each model."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from edge_agent.client.agent_client import AgentClient
from tests.console_cli.conftest import Run, console
from tests.support.bundles import Bundles
from tests.support.harness import InProcessAgent, trusted_agent


@dataclass
class OneAgent:
    agent: InProcessAgent
    token_file: Path

    def run(self, command: str, *args: str) -> Run:
        return console(None, command, *args, "--agent", self.agent.management,
                       "--token-file", str(self.token_file), "--insecure")

    def live(self) -> dict[str, str]:
        with AgentClient(self.agent.management, token=self.agent.token) as client:
            return {s.key: s.value for s in client.model_settings("mlp") if s.source == "live"}


@pytest.fixture
def one_agent(bundles: Bundles, tmp_path: Path) -> Iterator[OneAgent]:
    with trusted_agent(tmp_path / "state", bundles.public_key, deploy=bundles.mlp[1]) as agent:
        token_file = tmp_path / "agent.token"
        token_file.write_text(agent.token + "\n")
        yield OneAgent(agent, token_file)


def test_settings_show_set_unset_revert(one_agent: OneAgent) -> None:
    shown = one_agent.run("settings", "mlp", "--json")
    assert shown.code == 0, shown.err
    rows = {r["key"]: r for r in shown.json()[0]["settings"]}
    assert rows["instances"]["source"] == "bundle" and rows["isolation"]["value"] == '"auto"'
    changed = one_agent.run("settings", "mlp", "--set", "instances=2",
                            "--set", "preferred_batch_sizes=[2, 4]", "--set", "isolation=thread")
    assert changed.code == 0, changed.err
    assert "settings applied to version 1" in changed.out
    assert one_agent.live() == {"instances": "2", "preferred_batch_sizes": "[2, 4]",
                                "isolation": '"thread"'}
    table = one_agent.run("settings", "mlp")
    assert table.code == 0 and "live" in table.out and "instances" in table.out
    assert one_agent.run("settings", "mlp", "--unset", "isolation").code == 0
    assert one_agent.live() == {"instances": "2", "preferred_batch_sizes": "[2, 4]"}
    assert one_agent.run("settings", "mlp", "--revert").code == 0
    assert "isolation" in one_agent.live()
    with AgentClient(one_agent.agent.management, token=one_agent.agent.token) as client:
        kinds = [(d.kind, d.status) for d in client.deployments("mlp", limit=3)]
    assert kinds == [("settings", "committed")] * 3


@pytest.mark.parametrize(("args", "words"), [
    (["--set", "instances"], "expected KEY=VALUE"),
    (["--set", "instancez=2"], "unknown"),
    (["--set", "instances=0"], ">= 1"),
    (["--revert"], "no committed settings change"),
])
def test_bad_settings_input_is_one_line_and_changes_nothing(one_agent: OneAgent,
                                                            args: list[str], words: str) -> None:
    run = one_agent.run("settings", "mlp", *args)
    assert run.code == 1, run.out
    lines = [ln for ln in run.err.splitlines() if ln.strip()]
    assert len(lines) == 1 and words in lines[0], run.err
    assert one_agent.live() == {}


def test_status_shows_the_last_tuning_run(one_agent: OneAgent) -> None:
    with AgentClient(one_agent.agent.management, token=one_agent.agent.token) as client:
        client.record_tuning("mlp", "old run", {"candidates": []})
        client.record_tuning("mlp", "best: instances=2 at 900 infer/s", {"candidates": []})
    run = one_agent.run("status")
    assert run.code == 0, run.err
    assert "last tuning of mlp: best: instances=2 at 900 infer/s" in run.out
    assert "old run" not in run.out
