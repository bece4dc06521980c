"""The device log records what happened to the agent (issue 28): after a deploy, a hot swap,
a settings change, a rollback, a removal and a token rotation, ``edge-console logs`` (the
StreamLogs ring) holds one line per deployment step naming the deployment, the model and the
caller, and the loads, unloads and the rotation; the logging extension (Triton's LogSettings,
``/v2/logging``) reads the settings and changes them only where ``[grpc] log_control`` allows."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from edge_agent.client.agent_client import AgentClient
from edge_agent.state.token import rotate_token
from tests.support.bundles import Bundles
from tests.support.eventually import eventually
from tests.support.harness import AgentProcess

CALLER = "ops@bench (edge-console test)"


def _lines(client: AgentClient) -> list[str]:
    return [line.message for line in client.logs(tail=2000)]


def _deployments(lines: list[str]) -> dict[int, list[str]]:
    """Deployment id -> its log lines."""
    out: dict[int, list[str]] = {}
    for line in lines:
        match = re.match(r"deployment (\d+)\b", line)
        if match:
            out.setdefault(int(match[1]), []).append(line)
    return out


def test_every_operation_leaves_a_line_with_its_caller(bundles: Bundles,
                                                       tmp_path: Path) -> None:
    state = tmp_path / "state"
    with AgentProcess(state, trust=bundles.public_key) as agent:
        token = (state / "management.token").read_text().strip()
        with AgentClient(agent.management, token=token, caller=CALLER) as client:
            assert client.deploy(bundles.mlp[1]).ok
            assert client.deploy(bundles.mlp[2]).ok  # a hot swap
            assert client.set_model_settings("mlp", {"instances": "2"}).ok
            assert client.rollback("mlp").ok
            assert client.remove("mlp", 2).ok
        rotate_token(state)
        new = (state / "management.token").read_text().strip()
        with AgentClient(agent.management, token=new, caller=CALLER) as client:
            eventually(lambda: any("management token was rotated" in ln
                                   for ln in _lines(client)),
                       timeout=30, message="the rotation was not logged")
            lines = _lines(client)
    text = "\n".join(lines)
    deps = _deployments(lines)
    begun = [ln for ln in lines if re.match(r"deployment \d+: \S+ of mlp", ln)]
    kinds = [re.match(r"deployment \d+: (\S+) of", ln)[1] for ln in begun]  # type: ignore[index]
    assert kinds == ["deploy", "deploy", "settings", "rollback", "remove"], text
    for line in begun:  # who asked, from where
        assert f"by '{CALLER}' from 127.0.0.1:" in line, line
    steps = {dep: [re.sub(r"^deployment \d+ \([^)]*\): ", "", ln).split(":")[0]
                   for ln in ls[1:]] for dep, ls in deps.items()}
    first, swap, settings, rollback, removal = sorted(deps)
    assert steps[first][:3] == ["received", "verified", "staged"] and \
        steps[first][-1] == "committed", steps[first]
    for step in ("loaded", "warmed", "probed", "switched", "drained", "unloaded", "committed"):
        assert step in steps[swap], (step, steps[swap])
    assert any("instances = 2" in ln for ln in deps[settings]), deps[settings]
    assert steps[rollback][-1] == "committed" and steps[removal][-1] == "committed"
    assert re.search(r"loaded mlp version 2 on \S+ \(.*\) in [\d.]+ s", text), text
    assert "unloaded mlp version 1" in text and "unloaded mlp version 2" in text
    assert re.search(r"ready: serving \d+ model", text) or "starting (edge-agent" in text
    # the token never appears in the log
    assert token not in text and new not in text


def _http_address(agent: AgentProcess) -> str:
    match = re.search(r"HTTP on (\S+?);", "".join(agent.output))
    assert match, "".join(agent.output)
    return match[1]


def _log_settings(url: str) -> dict[str, object]:
    with grpcclient.InferenceServerClient(url) as client:
        return dict(client.get_log_settings(as_json=True)["settings"])


def test_log_settings_are_read_by_anyone_and_changed_only_when_allowed(
        bundles: Bundles, tmp_path: Path) -> None:
    import tritonclient.http as httpclient

    with AgentProcess(tmp_path / "a", trust=bundles.public_key,
                      extra=["--no-mdns", "--http", "127.0.0.1:0"]) as agent:
        settings = _log_settings(agent.grpc)
        assert set(settings) == {"log_file", "log_info", "log_warning", "log_error",
                                 "log_verbose_level", "log_format"}
        with grpcclient.InferenceServerClient(agent.grpc) as client:
            with pytest.raises(InferenceServerException) as refused:
                client.update_log_settings({"log_verbose_level": 1})
            assert "log_control" in str(refused.value)
            assert "logging" in client.get_server_metadata(as_json=True)["extensions"]
        assert _log_settings(agent.grpc) == settings  # nothing changed

    config = tmp_path / "agent.toml"
    config.write_text("[grpc]\nlog_control = true\n")
    with AgentProcess(tmp_path / "b", trust=bundles.public_key,
                      extra=["--no-mdns", "--http", "127.0.0.1:0", "--config",
                             str(config)]) as agent:
        http = _http_address(agent)
        with grpcclient.InferenceServerClient(agent.grpc) as client:
            after = client.update_log_settings({"log_verbose_level": 1,
                                                "log_format": "ISO8601"}, as_json=True)
            assert after["settings"]["log_verbose_level"]["uint32_param"] == 1
            assert after["settings"]["log_format"]["string_param"] == "ISO8601"
            with pytest.raises(InferenceServerException) as bad:
                client.update_log_settings({"log_file": "/tmp/x.log"})
            assert "log_file" in str(bad.value) and "not served" in str(bad.value)
        with httpclient.InferenceServerClient(http) as client:
            got = client.update_log_settings({"log_info": False, "log_verbose_level": 0})
            assert got["log_info"] is False and got["log_verbose_level"] == 0
            assert client.get_log_settings()["log_format"] == "ISO8601"
            with pytest.raises(InferenceServerException) as unknown:
                client.update_log_settings({"log_colour": True})
            assert "log_colour" in str(unknown.value)
        # a DEBUG line reached the output while verbose, and each change left a line
        eventually(lambda: any("log settings changed by" in ln for ln in agent.output),
                   timeout=30, message="the change was not logged")
