"""The agent's [registry] settings without surprises: given on the command line
(``--registry-allow``, ``--registry-insecure``, ``--registry-ca-file``,
``--registry-auth-file``) over the config file, and re-read on SIGHUP, so that allowing a
registry needs no restart. Real agent processes and a real docker-registry."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import numpy as np
import pytest

from console.commands import deploy_reference
from console.config import ConsoleSettings
from console.errors import DeploymentFailedError
from edge_agent.config.management import management_sections
from edge_agent.errors import ConfigError
from packager.cli import main as edge_pack
from tests.registry.registry_proc import BINARY, SKIP_REASON, RegistryProcess
from tests.support.bundles import Bundles
from tests.support.harness import AgentProcess

needs_registry = pytest.mark.skipif(BINARY is None, reason=SKIP_REASON)


def _settings(*agents: AgentProcess) -> ConsoleSettings:
    return ConsoleSettings(discovery=False, insecure=True, tokens={
        a.management: (a.state_dir / "management.token").read_text().strip() for a in agents})


def _active(agent: AgentProcess) -> int | None:
    with agent.client() as c:
        return next((v.version for v in c.models("mlp") if v.active and v.state == "READY"),
                    None)


def _hup_and_wait(agent: AgentProcess, expect: str, timeout: float = 60.0) -> None:
    """SIGHUP the agent and wait for the reload's log line (after those already seen)."""
    assert agent.proc is not None
    seen = len(agent.output)
    os.kill(agent.proc.pid, signal.SIGHUP)
    agent.wait_for_output(expect, since=seen, timeout=timeout)


def _infer_matches(agent: AgentProcess, bundles: Bundles, version: int) -> None:
    """The pulled version serves: KServe v2 inference agrees with the source model."""
    import tritonclient.grpc as tc

    x = np.random.default_rng(version).standard_normal((3, 64)).astype(np.float32)
    inp = tc.InferInput("input", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    with tc.InferenceServerClient(agent.grpc) as triton:
        result = triton.infer("mlp", [inp])
    assert result.get_response().model_version == str(version)
    np.testing.assert_allclose(result.as_numpy("probs"), bundles.reference(version, x),
                               rtol=1e-4, atol=1e-5)


@needs_registry
@pytest.mark.slow
def test_sighup_allows_a_registry_without_a_restart(registry: RegistryProcess,
                                                    bundles: Bundles, tmp_path: Path) -> None:
    for v in (1, 2):
        assert edge_pack(["push", str(bundles.mlp[v]),
                          f"oci://{registry.address}/edge/mlp:{v}", "--insecure", "-q"]) == 0
    config = tmp_path / "agent.toml"
    config.write_text(f'[registry]\ninsecure = ["{registry.address}"]\n')  # allows nothing
    with AgentProcess(tmp_path / "state", trust=bundles.public_key,
                      extra=["--no-mdns", "--config", str(config)]) as agent:
        settings = _settings(agent)
        ref = f"oci://{registry.address}/edge/mlp:1"
        with pytest.raises(DeploymentFailedError) as err:
            deploy_reference(ref, [agent.management], settings, None, insecure_registry=True)
        (report,) = err.value.reports
        assert "pulls from no registry" in report.error and "SIGHUP" in report.error
        assert _active(agent) is None

        config.write_text(f'[registry]\nallow = ["{registry.address}/edge"]\n'
                          f'insecure = ["{registry.address}"]\n')
        _hup_and_wait(agent, "SIGHUP: configuration reloaded")
        reports = deploy_reference(ref, [agent.management], settings, None,
                                   insecure_registry=True)
        assert reports[0].ok, reports
        assert _active(agent) == 1
        _infer_matches(agent, bundles, 1)

        # A bad edit is not applied: the settings in force stay, the agent keeps serving.
        config.write_text('[registry]\nallow = ["oci://nope"]\n')
        _hup_and_wait(agent, "SIGHUP: the configuration was not reloaded")
        assert any("registry" in line and "oci://nope" in line for line in agent.output)
        reports = deploy_reference(f"oci://{registry.address}/edge/mlp:2", [agent.management],
                                   settings, None, insecure_registry=True)
        assert reports[0].ok, reports
        assert _active(agent) == 2


@needs_registry
@pytest.mark.slow
def test_command_line_flags_allow_a_registry_and_survive_a_reload(
        registry: RegistryProcess, bundles: Bundles, tmp_path: Path) -> None:
    for v in (1, 2):
        assert edge_pack(["push", str(bundles.mlp[v]),
                          f"oci://{registry.address}/edge/mlp:{v}", "--insecure", "-q"]) == 0
    config = tmp_path / "agent.toml"
    config.write_text('[registry]\nallow = ["registry.example.com/models"]\n')  # not this one
    flags = ["--registry-allow", f"{registry.address}/edge", "--registry-insecure"]
    with AgentProcess(tmp_path / "state", trust=bundles.public_key,
                      extra=["--no-mdns", "--config", str(config), *flags]) as agent:
        settings = _settings(agent)
        reports = deploy_reference(f"oci://{registry.address}/edge/mlp:1", [agent.management],
                                   settings, None, insecure_registry=True)
        assert reports[0].ok, reports
        assert _active(agent) == 1
        # SIGHUP re-reads the file and lays the same flags over it again
        _hup_and_wait(agent, "SIGHUP: configuration reloaded")
        reports = deploy_reference(f"oci://{registry.address}/edge/mlp:2", [agent.management],
                                   settings, None, insecure_registry=True)
        assert reports[0].ok, reports
        assert _active(agent) == 2


def test_flags_merge_over_the_file(tmp_path: Path) -> None:
    ca, other_ca = tmp_path / "ca.pem", tmp_path / "other-ca.pem"
    ca.write_text("x")
    other_ca.write_text("y")
    data = {"registry": {"allow": ["ghcr.io/acme", "lab:5000/models"], "insecure": ["lab:5000"],
                         "ca_file": "ca.pem", "auth_file": "auth.json", "retries": 2}}
    from_file = management_sections(data, tmp_path).registry
    assert from_file.allow == ("ghcr.io/acme", "lab:5000/models")
    merged = management_sections(data, tmp_path,
                                 registry_allow=["127.0.0.1:5000/edge", "lab:5000/models"],
                                 registry_insecure=True, registry_ca_file=other_ca,
                                 registry_auth_file=tmp_path / "flag-auth.json").registry
    assert merged.allow == ("ghcr.io/acme", "lab:5000/models", "127.0.0.1:5000/edge")
    assert merged.insecure == ("lab:5000", "127.0.0.1:5000")  # + the flags' registries
    assert merged.ca_file == other_ca and merged.auth_file == tmp_path / "flag-auth.json"
    assert merged.retries == 2
    only_flags = management_sections({}, None, registry_allow=["lab:5000"]).registry
    assert only_flags.allow == ("lab:5000",) and only_flags.insecure == ()


@pytest.mark.parametrize(("flags", "message"), [
    ({"registry_insecure": True}, "--registry-insecure makes the registries of "
                                  "--registry-allow plain HTTP"),
    ({"registry_allow": ["oci://lab:5000/models"]}, "--registry-allow: 'oci://lab:5000/models'"),
    ({"registry_allow": ["Lab:5000/Models"]}, "--registry-allow"),
    ({"registry_allow": ["lab:5000"], "registry_ca_file": Path("/nonexistent/ca.pem")},
     "--registry-ca-file: /nonexistent/ca.pem is not a file"),
])
def test_bad_flags_are_one_clear_line(flags: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        management_sections({}, None, **flags)  # type: ignore[arg-type]
    assert message in str(err.value) and "\n" not in str(err.value)


def test_serve_help_names_the_registry_flags(capsys: pytest.CaptureFixture[str]) -> None:
    from edge_agent.cli import main

    with pytest.raises(SystemExit) as done:
        main(["serve", "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    for flag in ("--registry-allow", "--registry-insecure", "--registry-ca-file",
                 "--registry-auth-file", "SIGHUP re-reads agent.toml"):
        assert flag in text
