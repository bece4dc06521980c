"""edge-console status shows each version's parity figures from the device (real agent over
gRPC on 127.0.0.1 port 0, real console subprocesses)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.parity.bundles import ParityBundles
from tests.support.cli import Run, console
from tests.support.harness import InProcessAgent, sections, start_agent


@pytest.fixture
def agent(tmp_path: Path, parity_bundles: ParityBundles) -> Iterator[tuple[InProcessAgent, Path]]:
    a = start_agent(tmp_path / "agent", sections("parity-a", parity_bundles.public_key), workers=4)
    try:
        token = tmp_path / "a.token"
        token.write_text(a.token + "\n")
        yield a, token
    finally:
        a.stop()


def _run(agent: InProcessAgent, token: Path, *args: str) -> Run:
    return console(None, *args, "--agent", agent.management, "--token-file", str(token),
                   "--insecure")


def test_status_shows_the_parity_figures_of_each_version(
        agent: tuple[InProcessAgent, Path], parity_bundles: ParityBundles) -> None:
    a, token = agent
    assert _run(a, token, "deploy", str(parity_bundles.good[1])).code == 0
    refused = _run(a, token, "deploy", str(parity_bundles.tampered))
    assert refused.code == 1
    assert "parity" in refused.err and "max abs error" in refused.err
    assert _run(a, token, "deploy", str(parity_bundles.old_format)).code == 0

    status = _run(a, token, "status", "--json")
    assert status.code == 0, status.err
    figures = {(p["model"], p["version"]): p for p in status.json()[0]["parity"]}
    assert figures[("mlp", 1)]["passed"] is True
    assert figures[("mlp", 1)]["figures"].startswith("ok: abs ")
    assert figures[("mlp", 3)]["passed"] is False
    assert "disagrees" in figures[("mlp", 3)]["message"]
    assert figures[("mlp", 4)]["passed"] is None

    table = _run(a, token, "status")
    assert table.code == 0, table.err
    assert "parity on device" in table.out
    assert "ok: abs " in table.out
    assert "not checked (no reference data)" in table.out
    # the refused version was removed from disk; its figures stay in the history
    assert "parity failed: onnxruntime on this device disagrees" in table.out
