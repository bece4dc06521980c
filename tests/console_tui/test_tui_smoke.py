"""scripts/tui_smoke.sh: edge-console in a real terminal (tmux) against a real agent found by
mDNS on 127.0.0.1, its token from a console config file."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.console_tui.agents import RunningAgent

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "tui_smoke.sh"


@pytest.mark.skipif(shutil.which("tmux") is None,
                    reason="tmux is not installed (Debian/Ubuntu package: tmux)")
def test_tui_smoke_in_tmux(agents: Callable[..., RunningAgent], tmp_path: Path) -> None:
    name = f"smoke-{uuid.uuid4().hex[:6]}"  # loopback mDNS is shared: look for this one
    agent = agents(name, tls=True)  # the real path: TLS, pinned at first contact
    config = tmp_path / "console.toml"
    config.write_text(f'[tokens]\n"{name}" = "{agent.token}"\n')
    env = {**os.environ, "PYTHON": sys.executable, "SMOKE_EXPECT": f"{name} +● online",
           "XDG_CONFIG_HOME": str(tmp_path), "SMOKE_DEADLINE_S": "60"}
    out = subprocess.run([str(SCRIPT), "--interface", "127.0.0.1", "--config", str(config),
                          "--poll", "0.5", "--accept-new"], env=env, capture_output=True, text=True,
                         timeout=180, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"tui_smoke: ok: '{name} +● online'" in out.stdout
    assert out.stdout.rstrip().endswith("tui_smoke: passed")
