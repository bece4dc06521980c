"""agent.toml loading: flags override the file; bad values name the key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from edge_agent.config import DEFAULT_GRPC_ADDRESS, load_config
from edge_agent.errors import ConfigError


def test_file_then_flags(tmp_path: Path) -> None:
    toml = tmp_path / "agent.toml"
    toml.write_text(f"""
state_dir = "{tmp_path}/from-file"
[grpc]
address = "0.0.0.0:9001"
max_message_bytes = 1048576
[models.mlp]
max_queue_delay_us = 250
instances = 2
max_queue_size = 8
default_timeout_us = 100000
preferred_batch_sizes = [4, 8]
""")
    cfg = load_config(toml)
    assert cfg.state_dir == tmp_path / "from-file"
    assert cfg.grpc.address == "0.0.0.0:9001" and cfg.grpc.max_message_bytes == 1 << 20
    assert cfg.uds_path == tmp_path / "from-file" / "run" / "inference.sock"
    mlp = cfg.models.overrides["mlp"]
    assert (mlp.max_queue_delay_us, mlp.instances, mlp.max_queue_size,
            mlp.default_timeout_us, mlp.preferred_batch_sizes) == (250, 2, 8, 100000, (4, 8))
    cfg = load_config(toml, state_dir=tmp_path / "flag", grpc_address="127.0.0.1:0",
                      no_uds=True, max_message_bytes=2048)
    assert cfg.state_dir == tmp_path / "flag" and cfg.grpc.address == "127.0.0.1:0"
    assert cfg.uds_path is None and cfg.grpc.max_message_bytes == 2048
    assert cfg.models.overrides["mlp"].instances == 2


def test_settings_for_every_model_and_a_models_own_section_wins(tmp_path: Path) -> None:
    toml = tmp_path / "agent.toml"
    toml.write_text("""
[models."*"]
isolation = "process"
execution_timeout_ms = 5000
[models.mlp]
execution_timeout_ms = 100
instances = 2
""")
    cfg = load_config(toml, state_dir=tmp_path)
    assert (cfg.models.defaults.isolation, cfg.models.defaults.execution_timeout_ms) == (
        "process", 5000)
    mlp = cfg.models.overrides["mlp"]
    assert (mlp.isolation, mlp.execution_timeout_ms, mlp.instances) == ("process", 100, 2)
    assert "*" not in cfg.models.overrides
    assert load_config(state_dir=tmp_path).models.defaults.isolation == "auto"


def test_defaults(tmp_path: Path) -> None:
    cfg = load_config(state_dir=tmp_path)
    assert cfg.grpc.address == DEFAULT_GRPC_ADDRESS and cfg.models.overrides == {}
    assert cfg.models_dir == tmp_path / "models"


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[grpc]\nadress = '127.0.0.1:1'\n", "grpc.adress"),
        ("[grpc]\naddress = 'nohost'\n", "grpc.address"),
        ("[grpc]\nmax_message_bytes = -1\n", "grpc.max_message_bytes"),
        ("[grpc]\nworkers = true\n", "grpc.workers"),
        ("[models.mlp]\ninstances = 0\n", "models.mlp.instances"),
        ("[models.mlp]\nmax_queue_size = 'big'\n", "models.mlp.max_queue_size"),
        ("[models.mlp]\nbatch = 3\n", "models.mlp.batch"),
        ("[models.mlp]\nisolation = 'fork'\n", "models.mlp.isolation"),
        ('[models."*"]\ndefault_version = 2\n', 'models."*".default_version'),
        ('[models."*"]\nthreads = -1\n', "models.*.threads"),
        ("[mangement]\nport = 1\n", "mangement"),
        ("state_dir = 3\n", "state_dir"),
        ("[grpc\n", "not valid TOML"),
    ],
)
def test_bad_values_name_the_key(tmp_path: Path, text: str, key: str) -> None:
    toml = tmp_path / "agent.toml"
    toml.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(key)):
        load_config(toml, state_dir=tmp_path if "state_dir" not in text else None)


def test_no_state_dir_and_long_socket(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--state-dir"):
        load_config()
    with pytest.raises(ConfigError, match=r"grpc\.uds"):
        load_config(state_dir=tmp_path, uds=tmp_path / ("x" * 120))
    with pytest.raises(ConfigError, match="no listener"):
        load_config(state_dir=tmp_path, no_uds=True, grpc_address="none")


def test_default_handler_pool_is_small() -> None:
    """8 handler threads: on 2 cores a 32-thread pool cost more CPU per request (GIL
    handoffs) for no throughput (docs/performance.md); grpc.workers raises it."""
    from edge_agent.config import GrpcConfig

    assert GrpcConfig().workers == 8
