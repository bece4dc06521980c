"""A registry that wants credentials (htpasswd basic auth): push with --password-stdin, pull
with a docker config.json, an agent with its own auth_file; without them, one clear line."""

from __future__ import annotations

import base64
import io
import json
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from packager.cli import main as edge_pack
from tests.registry.registry_proc import BINARY, SKIP_REASON, RegistryProcess, running_registry
from tests.support.bundles import Bundles

pytestmark = pytest.mark.skipif(BINARY is None, reason=SKIP_REASON)
USER, PASSWORD = "robot", "s3cret-pass"


def _bcrypt(password: str) -> str:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            import crypt
    except ImportError:
        pytest.skip("no crypt module here to make a bcrypt htpasswd entry")
    hashed = crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16))  # cost 4: fast
    if not hashed or not hashed.startswith("$2"):
        pytest.skip("this libcrypt makes no bcrypt hashes")
    return hashed


@pytest.fixture
def locked(tmp_path: Path) -> Iterator[RegistryProcess]:
    with running_registry(tmp_path / "locked", htpasswd=f"{USER}:{_bcrypt(PASSWORD)}") as reg:
        yield reg


def test_credentials_from_stdin_and_docker_config(locked: RegistryProcess, bundles: Bundles,
                                                  tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    ref = f"oci://{locked.address}/edge/mlp:1"
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "empty-docker"))
    assert edge_pack(["push", str(bundles.mlp[1]), ref, "--insecure", "-q"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ("credentials" in err or "refused access" in err), err

    monkeypatch.setattr("sys.stdin", io.StringIO(PASSWORD + "\n"))
    assert edge_pack(["push", str(bundles.mlp[1]), ref, "--insecure", "-q", "--username", USER,
                      "--password-stdin"]) == 0
    capsys.readouterr()

    docker = tmp_path / "docker"
    docker.mkdir()
    auth = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    (docker / "config.json").write_text(json.dumps({"auths": {locked.address: {"auth": auth}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(docker))
    out = tmp_path / "pulled"
    assert edge_pack(["pull", ref, "--out", str(out), "--insecure", "-q"]) == 0
    assert (out / bundles.mlp[1].name).read_bytes() == bundles.mlp[1].read_bytes()

    wrong = base64.b64encode(f"{USER}:nope".encode()).decode()
    (docker / "config.json").write_text(json.dumps({"auths": {locked.address: {"auth": wrong}}}))
    assert edge_pack(["pull", ref, "--out", str(tmp_path / "again"), "--insecure"]) == 1
    assert "edge-pack: error:" in capsys.readouterr().err


def _push_with_password(locked: RegistryProcess, bundles: Bundles, tmp_path: Path,
                        monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    """Push MLP version 1 with --password-stdin; the reference and a config.json holding
    the credentials (tmp_path/registry-auth.json)."""
    ref = f"oci://{locked.address}/edge/mlp:1"
    monkeypatch.setattr("sys.stdin", io.StringIO(PASSWORD + "\n"))
    assert edge_pack(["push", str(bundles.mlp[1]), ref, "--insecure", "-q", "--username", USER,
                      "--password-stdin"]) == 0
    auth = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    creds = tmp_path / "registry-auth.json"
    creds.write_text(json.dumps({"auths": {locked.address: {"auth": auth}}}))
    return ref, creds


def test_an_agent_pulls_with_its_own_auth_file(locked: RegistryProcess, bundles: Bundles,
                                               tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from console.commands import deploy_reference
    from console.config import ConsoleSettings
    from console.errors import DeploymentFailedError
    from tests.support.harness import AgentProcess

    ref, creds = _push_with_password(locked, bundles, tmp_path, monkeypatch)
    configs = {}
    for name, extra in (("with", 'auth_file = "registry-auth.json"\n'), ("without", "")):
        d = tmp_path / name
        d.mkdir()
        (d / "registry-auth.json").write_text(creds.read_text())
        configs[name] = d / "agent.toml"
        configs[name].write_text(f'[registry]\nallow = ["{locked.address}/edge"]\n'
                                 f'insecure = ["{locked.address}"]\n{extra}')
    with AgentProcess(tmp_path / "with" / "state", trust=bundles.public_key,
                      extra=["--no-mdns", "--config", str(configs["with"])]) as a, \
            AgentProcess(tmp_path / "without" / "state", trust=bundles.public_key,
                         extra=["--no-mdns", "--config", str(configs["without"])]) as b:
        settings = ConsoleSettings(discovery=False, insecure=True, tokens={
            x.management: (x.state_dir / "management.token").read_text().strip()
            for x in (a, b)})
        reports = deploy_reference(ref, [a.management], settings, None, insecure_registry=True,
                                   registry_config=creds)
        assert reports[0].ok, reports
        with pytest.raises(DeploymentFailedError) as err:  # the console's credentials stay
            deploy_reference(ref, [b.management], settings, None,  # with the console
                             insecure_registry=True, registry_config=creds)
        assert "wants credentials" in err.value.reports[0].error
        with b.client() as c:
            assert c.models("mlp") == []


def test_an_agent_started_with_registry_flags_only(locked: RegistryProcess, bundles: Bundles,
                                                   tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """--registry-allow, --registry-insecure and --registry-auth-file: no config file."""
    from console.commands import deploy_reference
    from console.config import ConsoleSettings
    from tests.support.harness import AgentProcess

    ref, creds = _push_with_password(locked, bundles, tmp_path, monkeypatch)
    flags = ["--registry-allow", f"{locked.address}/edge", "--registry-insecure",
             "--registry-auth-file", str(creds)]
    with AgentProcess(tmp_path / "state", trust=bundles.public_key,
                      extra=["--no-mdns", *flags]) as agent:
        settings = ConsoleSettings(discovery=False, insecure=True, tokens={
            agent.management: (agent.state_dir / "management.token").read_text().strip()})
        reports = deploy_reference(ref, [agent.management], settings, None,
                                   insecure_registry=True, registry_config=creds)
        assert reports[0].ok, reports
        with agent.client() as c:
            assert [v.version for v in c.models("mlp") if v.active] == [1]
