"""The orchestration keys of agent.toml: parsed into the per-model settings, bad values refused
with one line naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from edge_agent.config import AgentConfig, load_config
from edge_agent.config.models import parse_version_policy
from edge_agent.core.overrides import policy_versions
from edge_agent.errors import ConfigError


def _load(tmp_path: Path, text: str) -> AgentConfig:
    path = tmp_path / "agent.toml"
    path.write_text(f'state_dir = "{tmp_path / "state"}"\n' + text)
    return load_config(path)


def test_orchestration_keys_parse(tmp_path: Path) -> None:
    config = _load(tmp_path, '[agent]\nmemory_budget_mib = 512\n'
                   '[models."*"]\nidle_unload_s = 300\n'
                   '[models.cam]\nload = "on-demand"\nload_timeout_ms = 2000\npinned = true\n'
                   'version_policy = "latest 2"\n')
    assert config.models.memory_budget_bytes == 512 << 20
    cam = config.models.overrides["cam"]
    assert (cam.load, cam.load_timeout_ms, cam.pinned, cam.version_policy, cam.idle_unload_s) \
        == ("on-demand", 2000, True, "latest 2", 300.0)
    assert config.models.defaults.load == "eager" and not config.models.defaults.pinned
    assert _load(tmp_path, "").models.memory_budget_bytes is None


@pytest.mark.parametrize(("text", "names"), [
    ("[agent]\nmemory_budget_mib = 0\n", "agent.memory_budget_mib"),
    ("[agent]\nmemory_budget_mib = true\n", "agent.memory_budget_mib"),
    ("[agent]\nbudget = 1\n", "agent.budget"),
    ('[models.m]\nload = "lazy"\n', "models.m.load"),
    ('[models.m]\nversion_policy = "latest 0"\n', "models.m.version_policy"),
    ('[models.m]\nversion_policy = "newest"\n', "models.m.version_policy"),
    ("[models.m]\nidle_unload_s = -1\n", "models.m.idle_unload_s"),
    ('[models.m]\npinned = "yes"\n', "models.m.pinned"),
])
def test_bad_values_are_refused_naming_the_key(tmp_path: Path, text: str, names: str) -> None:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, text)
    assert names in str(err.value) and "\n" not in str(err.value)


def test_version_policies_select_like_tritons() -> None:
    disk = [1, 2, 3, 5]
    assert policy_versions("active", disk, 2) == [2]
    assert policy_versions("active", disk, None) == [5]
    assert policy_versions("all", disk, 2) == disk
    assert policy_versions("latest 2", disk, 1) == [3, 5]
    assert policy_versions("specific 1, 5, 9", disk, 2) == [1, 5]
    assert parse_version_policy(" latest 3 ") == ("latest", (3,))
