"""agent.toml validation: every refusal is a ConfigError naming the key at fault."""

from __future__ import annotations

from pathlib import Path

import pytest

from edge_agent.config import AgentConfig, load_config
from edge_agent.errors import ConfigError, ErrorCode


def load(tmp_path: Path, text: str) -> AgentConfig:
    path = tmp_path / "agent.toml"
    path.write_text(text)
    return load_config(path, state_dir=tmp_path / "state")


def test_a_valid_file_sets_grpc_and_per_model_settings(tmp_path: Path) -> None:
    config = load(tmp_path, """
[grpc]
address = "127.0.0.1:0"
workers = 7
[models.cam]
instances = 2
priority = 3
version_policy = "latest 2"
""")
    assert config.grpc.address == "127.0.0.1:0" and config.grpc.workers == 7
    cam = config.models.overrides["cam"]
    assert cam.instances == 2 and cam.priority == 3


@pytest.mark.parametrize(("text", "key"), [
    ("nonsense = 1", "'nonsense' is unknown"),
    ("[grpc]\nworkerz = 3", "grpc.workerz"),
    ("[grpc]\nworkers = 0", "grpc.workers"),
    ("[grpc]\nworkers = -2", "grpc.workers"),
    ("[grpc]\naddress = \"localhost\"", "grpc.address"),
    ("[grpc]\nrepository_control = \"yes\"", "grpc.repository_control"),
    ("[models.cam]\ninstances = 0", "models.cam.instances"),
    ("[models.cam]\npriority = 0", "models.cam.priority"),
    ("[models.cam]\nisolation = \"sometimes\"", "models.cam.isolation"),
    ("[models.cam]\nload = \"lazy\"", "models.cam.load"),
    ("[models.cam]\nversion_policy = \"newest\"", "models.cam.version_policy"),
    ("[models.cam]\nopenvino_hint = \"FAST\"", "models.cam.openvino_hint"),
    ("[models.cam]\nbatch = 4", "models.cam.batch"),
])
def test_a_bad_value_names_its_key(tmp_path: Path, text: str, key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")) as info:
        load(tmp_path, text)
    assert info.value.code is ErrorCode.INVALID_ARGUMENT


def test_a_file_that_is_not_toml_is_refused_with_its_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid TOML"):
        load(tmp_path, "[grpc\n")


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "absent.toml", state_dir=tmp_path)


def test_without_a_state_directory_the_fix_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--state-dir"):
        load_config(None)
