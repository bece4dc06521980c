"""``edge-console remove MODEL --version N``: the scripting twin of the TUI's remove, against a
real agent (versions 1 and 2 of the MLP, 2 active)."""

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

    def remove(self, *args: str) -> Run:
        return console(None, "remove", *args, "--agent", self.agent.management,
                       "--token-file", str(self.token_file), "--insecure")  # plaintext agent

    def versions(self) -> list[tuple[int, bool]]:
        with AgentClient(self.agent.management, token=self.agent.token) as client:
            return [(v.version, v.active) for v in client.models("mlp")]


@pytest.fixture
def one_agent(bundles: Bundles, tmp_path: Path) -> Iterator[OneAgent]:
    with trusted_agent(tmp_path / "state", bundles.public_key, deploy=bundles.mlp[1]) as agent:
        with AgentClient(agent.management, token=agent.token) as client:
            assert client.deploy(bundles.mlp[2]).ok
        token_file = tmp_path / "agent.token"
        token_file.write_text(agent.token + "\n")
        yield OneAgent(agent, token_file)


def _one_line(run: Run) -> str:
    assert run.code == 1, (run.out, run.err)
    lines = [ln for ln in run.err.splitlines() if ln.strip()]
    assert len(lines) == 1, run.err
    return lines[0]


def test_remove_deletes_an_inactive_version_without_asking(one_agent: OneAgent) -> None:
    assert one_agent.versions() == [(1, False), (2, True)]
    run = one_agent.remove("mlp", "--version", "1")
    assert run.code == 0, run.err
    assert run.out.strip() == f"{one_agent.agent.management}: version 1 removed from disk"
    assert one_agent.versions() == [(2, True)]
    models = one_agent.agent.state_dir / "models" / "mlp"
    assert sorted(p.name for p in models.iterdir()) == ["2"]


def test_remove_refuses_the_active_version_and_says_so(one_agent: OneAgent) -> None:
    line = _one_line(one_agent.remove("mlp", "--version", "2"))
    assert line.startswith("edge-console remove: error: remove of mlp version 2 failed")
    assert "mlp version 2 is active" in line and "roll back" in line
    assert one_agent.versions() == [(1, False), (2, True)]


def test_remove_of_a_missing_version_names_it(one_agent: OneAgent) -> None:
    line = _one_line(one_agent.remove("mlp", "--version", "9"))
    assert "mlp has no version 9 on this device" in line
    assert one_agent.versions() == [(1, False), (2, True)]


def test_remove_json_reports_the_result(one_agent: OneAgent) -> None:
    run = one_agent.remove("mlp", "--version", "1", "--json")
    assert run.code == 0, run.err
    (report,) = run.json()
    assert report["agent"] == one_agent.agent.management
    assert report["result"]["ok"] is True
    assert report["result"]["deployment"]["kind"] == "remove"


def test_remove_help_teaches_and_version_is_required() -> None:
    shown = console(None, "remove", "--help")
    assert shown.code == 0
    assert "--version N" in shown.out and "active version is refused" in shown.out
    missing = console(None, "remove", "mlp", "--agent", "127.0.0.1:1")
    assert missing.code == 2 and "--version" in missing.err


def test_rollback_and_remove_json_name_the_model_as_model(one_agent: OneAgent) -> None:
    """Issue 28: a rollback's report named the model ``"bundle"``."""
    run = console(None, "rollback", "mlp", "--json", "--agent", one_agent.agent.management,
                  "--token-file", str(one_agent.token_file), "--insecure")
    assert run.code == 0, run.err
    (report,) = run.json()
    assert report["model"] == "mlp" and "bundle" not in report
    assert report["result"]["ok"] is True and one_agent.versions() == [(1, True), (2, False)]
    (removed,) = one_agent.remove("mlp", "--version", "2", "--json").json()
    assert removed["model"] == "mlp" and "bundle" not in removed
