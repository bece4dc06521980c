"""``edge-console rollback`` shows each agent's target before it acts (issue 17): the line
comes first, the rollback then names that version, ``--dry-run`` stops after the line, and a
rollback with nowhere to go (never back to a version rolled back from) says why."""

from __future__ import annotations

from pathlib import Path

from edge_agent.client.agent_client import AgentClient
from tests.console_cli.conftest import Run, console
from tests.support.bundles import Bundles
from tests.support.harness import trusted_agent


def _rollback(address: str, token_file: Path, *args: str) -> Run:
    return console(None, "rollback", "mlp", "--agent", address, "--token-file",
                   str(token_file), "--insecure", *args)  # the in-process agent: plaintext


def test_rollback_shows_its_target_first_and_never_toggles(bundles: Bundles,
                                                           tmp_path: Path) -> None:
    with trusted_agent(tmp_path / "state", bundles.public_key, deploy=bundles.mlp[1]) as agent:
        with AgentClient(agent.management, token=agent.token) as client:
            assert client.deploy(bundles.mlp[2]).ok
        token = tmp_path / "agent.token"
        token.write_text(agent.token)
        address = agent.management

        def active() -> int:
            with AgentClient(address, token=agent.token) as c:
                return next(v.version for v in c.models("mlp") if v.active)

        dry = _rollback(address, token, "--dry-run")
        assert dry.code == 0, dry.err
        assert dry.out.splitlines()[0].startswith(f"{address}: would roll back mlp: version 2 "
                                                  "-> 1 (version 1 was active before 2)")
        assert active() == 2  # a dry run changes nothing

        run = _rollback(address, token)
        assert run.code == 0, run.err
        first, *rest = run.out.splitlines()
        assert first.startswith(f"{address}: rolling back mlp: version 2 -> 1"), run.out
        assert rest and "version 1" in rest[-1]  # the agent's own result comes after
        assert active() == 1

        again = _rollback(address, token)  # 1 -> 2 would re-activate what was rolled back from
        assert again.code == 1 and again.err.count("\n") == 1, again.err
        assert "not going back to version(s) [2]" in again.err
        assert active() == 1
