"""TLS is the default: a registry with a certificate from a private CA is refused until that
CA is given (--ca-file; agents: [registry] ca_file), and plain HTTP only with --insecure."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from edge_agent.management.tls import load_or_create
from packager.cli import main as edge_pack
from tests.registry.registry_proc import BINARY, SKIP_REASON, RegistryProcess, running_registry
from tests.support.bundles import Bundles

pytestmark = pytest.mark.skipif(BINARY is None, reason=SKIP_REASON)


@pytest.fixture
def tls_registry(tmp_path: Path) -> Iterator[RegistryProcess]:
    (tmp_path / "certs").mkdir()
    cert, key = load_or_create(tmp_path / "certs")  # self-signed, names 127.0.0.1
    with running_registry(tmp_path / "tls", tls=(cert, key)) as reg:
        yield reg


def test_tls_by_default_and_a_private_ca(tls_registry: RegistryProcess, bundles: Bundles,
                                         tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert tls_registry.tls is not None
    ref = f"oci://{tls_registry.address}/edge/mlp:1"
    assert edge_pack(["push", str(bundles.mlp[1]), ref, "-q"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "TLS" in err and "--ca-file" in err, err
    assert edge_pack(["push", str(bundles.mlp[1]), ref, "-q", "--insecure"]) == 1  # not HTTP
    capsys.readouterr()
    ca = ["--ca-file", str(tls_registry.tls[0])]
    assert edge_pack(["push", str(bundles.mlp[1]), ref, "-q", *ca]) == 0
    out = tmp_path / "pulled"
    assert edge_pack(["pull", ref, "--out", str(out), "-q", *ca]) == 0
    assert (out / bundles.mlp[1].name).read_bytes() == bundles.mlp[1].read_bytes()


def test_an_agent_trusts_a_private_ca_given_by_flag(tls_registry: RegistryProcess,
                                                    bundles: Bundles, tmp_path: Path) -> None:
    """--registry-ca-file: the agent pulls over TLS from a registry with a private CA (refused
    without it)."""
    from console.commands import deploy_reference
    from console.config import ConsoleSettings
    from console.errors import DeploymentFailedError
    from tests.support.harness import AgentProcess

    assert tls_registry.tls is not None
    ca = tls_registry.tls[0]
    ref = f"oci://{tls_registry.address}/edge/mlp:1"
    assert edge_pack(["push", str(bundles.mlp[1]), ref, "-q", "--ca-file", str(ca)]) == 0
    allow = ["--registry-allow", f"{tls_registry.address}/edge"]
    with AgentProcess(tmp_path / "with" / "state", trust=bundles.public_key,
                      extra=["--no-mdns", *allow, "--registry-ca-file", str(ca)]) as a, \
            AgentProcess(tmp_path / "without" / "state", trust=bundles.public_key,
                         extra=["--no-mdns", *allow]) as b:
        settings = ConsoleSettings(discovery=False, insecure=True, tokens={
            x.management: (x.state_dir / "management.token").read_text().strip()
            for x in (a, b)})
        reports = deploy_reference(ref, [a.management], settings, None, registry_ca=ca)
        assert reports[0].ok, reports
        with pytest.raises(DeploymentFailedError) as err:
            deploy_reference(ref, [b.management], settings, None, registry_ca=ca)
        assert "TLS" in err.value.reports[0].error, err.value.reports[0].error
        with a.client() as c:
            assert [v.version for v in c.models("mlp") if v.active] == [1]
