"""``--http`` and ``[http]``: off by default, a bare port on 127.0.0.1, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from edge_agent.config import load_config
from edge_agent.errors import ConfigError


def _toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agent.toml"
    path.write_text(text)
    return path


def test_off_by_default(tmp_path: Path) -> None:
    assert load_config(state_dir=tmp_path).http.listen is None


@pytest.mark.parametrize(("flag", "listen"), [("8000", "127.0.0.1:8000"),
                                              ("0.0.0.0:8000", "0.0.0.0:8000"),
                                              ("127.0.0.1:0", "127.0.0.1:0"), ("none", None)])
def test_the_flag(tmp_path: Path, flag: str, listen: str | None) -> None:
    assert load_config(state_dir=tmp_path, http_address=flag).http.listen == listen


def test_the_file_and_the_flag_over_it(tmp_path: Path) -> None:
    path = _toml(tmp_path, '[http]\nlisten = 8080\nmax_body_bytes = 1024\n'
                           'max_connections = 3\nidle_timeout_s = 2.5\nmetrics = false\n')
    http = load_config(path, state_dir=tmp_path).http
    assert (http.listen, http.max_body_bytes, http.max_connections, http.idle_timeout_s,
            http.metrics) == ("127.0.0.1:8080", 1024, 3, 2.5, False)
    assert load_config(path, state_dir=tmp_path,
                       http_address="127.0.0.2:9").http.listen == "127.0.0.2:9"


@pytest.mark.parametrize(("text", "needle"), [
    ("[http]\nlisten = 'localhost'\n", "http.listen"),
    ("[http]\nlisten = true\n", "http.listen"),
    ("[http]\nport = 8000\n", "'http.port' is unknown"),
    ("[http]\nmax_body_bytes = 0\n", "http.max_body_bytes"),
    ("[http]\nidle_timeout_s = -1\n", "http.idle_timeout_s"),
    ("[http]\nmetrics = 'yes'\n", "http.metrics"),
    ("[http]\nheader_timeout_s = 0\n", "http.header_timeout_s"),
    ("[http]\nbody_timeout_s = 'soon'\n", "http.body_timeout_s"),
    ("[http]\nmax_connections_per_peer = 0\n", "http.max_connections_per_peer"),
    ("[http]\nmax_inflate_ratio = -2\n", "http.max_inflate_ratio"),
    ("[http]\nmax_json_elements = 1.5\n", "http.max_json_elements"),
    ("[http]\nmax_json_depth = 0\n", "http.max_json_depth"),
    ("[http]\nmetrics_cache_s = -1\n", "http.metrics_cache_s"),
])
def test_bad_settings_name_the_key(tmp_path: Path, text: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        load_config(_toml(tmp_path, text), state_dir=tmp_path)


def test_a_bad_flag_names_the_flag(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--http"):
        load_config(state_dir=tmp_path, http_address="no-port")


def test_a_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    import socket

    from edge_agent.config.http import HttpConfig
    from edge_agent.core.dataplane import DataPlane
    from edge_agent.frontends.common.context import FrontendContext
    from edge_agent.frontends.http.routes import KServeRoutes
    from edge_agent.frontends.http.server import HttpFrontEnd

    plane = DataPlane(tmp_path)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        front = HttpFrontEnd(HttpConfig(listen=f"127.0.0.1:{port}"),
                             KServeRoutes(FrontendContext(plane)))
        try:
            with pytest.raises(ConfigError, match=f"cannot listen on 127.0.0.1:{port}"):
                front.start()
        finally:
            front.stop()
            plane.close()


def test_serve_with_http_in_a_real_agent_process(tmp_path: Path) -> None:
    """``edge-agent serve --http 127.0.0.1:0``: the ready line names the HTTP address, which
    answers health and /metrics; SIGTERM stops it cleanly."""
    import http.client
    import re

    from tests.support.harness import AgentProcess

    agent = AgentProcess(tmp_path / "state", allow_unsigned=True,
                         extra=["--no-mdns", "--http", "127.0.0.1:0"])
    with agent:
        ready = next(line for line in agent.output if "edge-agent ready" in line)
        match = re.search(r"HTTP on (127\.0\.0\.1:\d+);", ready)
        assert match, ready
        host, _, port = match.group(1).rpartition(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        try:
            conn.request("GET", "/v2/health/ready")
            response = conn.getresponse()
            response.read()
            assert response.status == 200
            conn.request("GET", "/metrics")
            response = conn.getresponse()
            assert response.status == 200 and b"edge_agent_info" in response.read()
        finally:
            conn.close()
    assert agent.proc is not None and agent.proc.returncode == 0
