"""Deploy by reference: the console resolves oci://...:TAG to a digest, real agent processes
pull the bundle for their profile from a real docker-registry and deploy it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from console.commands import deploy_reference
from console.config import ConsoleSettings
from console.errors import BundleRejectedError, DeploymentFailedError
from packager.cli import main as edge_pack
from tests.registry.registry_proc import (
    BINARY,
    SKIP_REASON,
    CuttingRelay,
    RegistryProcess,
    running_registry,
)
from tests.support.bundles import Bundles
from tests.support.harness import AgentProcess

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(BINARY is None, reason=SKIP_REASON)]


@dataclass
class Site:
    registry: RegistryProcess
    relay: CuttingRelay
    a: AgentProcess
    b: AgentProcess
    settings: ConsoleSettings

    def push(self, bundle: Path, ref: str) -> None:
        assert edge_pack(["push", str(bundle), ref, "--insecure", "-q"]) == 0

    def active(self, agent: AgentProcess, model: str = "mlp") -> int | None:
        with agent.client() as c:
            return next((v.version for v in c.models(model) if v.active
                         and v.state == "READY"), None)

    def deploy(self, ref: str, *agents: AgentProcess) -> list:
        return deploy_reference(ref, [a.management for a in agents], self.settings, None,
                                insecure_registry=True)


def _agent(root: Path, bundles: Bundles, allow: list[str], insecure: list[str]
           ) -> AgentProcess:
    root.mkdir(parents=True)
    config = root / "agent.toml"
    config.write_text(f"[registry]\nallow = {json.dumps(allow)}\n"
                      f"insecure = {json.dumps(insecure)}\nretries = 2\n")
    return AgentProcess(root / "state", trust=bundles.public_key,
                        extra=["--no-mdns", "--config", str(config)])


@pytest.fixture(scope="module")
def site(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    root = tmp_path_factory.mktemp("site")
    with running_registry(root / "registry") as reg, \
            CuttingRelay(reg.address, cut_after=-1, cuts=0) as relay:
        allow = [f"{reg.address}/edge", f"{relay.address}/edge"]
        insecure = [reg.address, relay.address]
        with _agent(root / "a", bundles, allow, insecure) as a, \
                _agent(root / "b", bundles, allow, insecure) as b:
            tokens = {x.management: (x.state_dir / "management.token").read_text().strip()
                      for x in (a, b)}
            yield Site(reg, relay, a, b, ConsoleSettings(discovery=False, tokens=tokens,
                                                         insecure=True))


def test_deploy_by_reference_to_two_agents(site: Site, bundles: Bundles) -> None:
    site.push(bundles.mlp[1], f"oci://{site.registry.address}/edge/mlp:1")
    reports = site.deploy(f"oci://{site.registry.address}/edge/mlp:1", site.a, site.b)
    assert [r.ok for r in reports] == [True, True], reports
    assert site.active(site.a) == site.active(site.b) == 1
    with site.a.client() as c:
        (dep,) = [d for d in c.deployments("mlp") if d.to_version == 1]
    received = next(s for s in dep.steps if s.step == "received")
    assert f"{site.registry.address}/edge/mlp@sha256:" in received.message


def test_an_unknown_tag_is_refused_before_any_agent(site: Site) -> None:
    with pytest.raises(BundleRejectedError, match="not found"):
        site.deploy(f"oci://{site.registry.address}/edge/mlp:404", site.a)


def test_the_allow_list_refuses_another_repository(site: Site, bundles: Bundles) -> None:
    before = site.active(site.a)
    site.push(bundles.mlp[2], f"oci://{site.registry.address}/other/mlp:2")
    with pytest.raises(DeploymentFailedError) as err:
        site.deploy(f"oci://{site.registry.address}/other/mlp:2", site.a)
    (report,) = err.value.reports
    assert "[registry] allow" in report.error and "other/mlp" in report.error
    assert site.active(site.a) == before


def test_a_tampered_blob_is_refused_and_nothing_changes(site: Site, bundles: Bundles) -> None:
    import hashlib

    before = site.active(site.a)
    site.push(bundles.mlp[2], f"oci://{site.registry.address}/edge/mlp:2")
    digest = "sha256:" + hashlib.sha256(bundles.mlp[2].read_bytes()).hexdigest()
    data = site.registry.blob_file(digest)
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    data.write_bytes(bytes(raw))
    with pytest.raises(DeploymentFailedError) as err:
        site.deploy(f"oci://{site.registry.address}/edge/mlp:2", site.a)
    assert "tampered or corrupt" in err.value.reports[0].error
    assert site.active(site.a) == before
    assert not list((site.a.state_dir / "incoming").glob("*"))  # nothing left behind


def test_a_cut_download_resumes(site: Site, bundles: Bundles) -> None:
    size = bundles.mlp[3].stat().st_size
    assert size > 40_000  # the cut lands inside the bundle
    site.push(bundles.mlp[3], f"oci://{site.registry.address}/edge/mlp:3")
    site.relay.arm(cut_after=20_000, cuts=1)
    reports = site.deploy(f"oci://{site.relay.address}/edge/mlp:3", site.a)
    assert reports[0].ok, reports
    assert site.active(site.a) == 3
    assert site.relay.cut_done == 1
    assert any(b"range: bytes=" in r.lower() for r in site.relay.requests)  # resumed


def test_a_registry_that_goes_away_mid_pull_leaves_the_previous_version(
        site: Site, bundles: Bundles, tmp_path: Path) -> None:
    from packager.build import build_bundles
    from packager.samples import make_mlp

    before = site.active(site.a)
    assert before is not None
    src = make_mlp(tmp_path / "wide.onnx", hidden=1024, seed=8)  # ~300 KB: cut mid-way
    (wide,) = build_bundles(src, name="mlp", version=8, profiles=["x86_64-cpu-onnxruntime"],
                            out_dir=tmp_path / "out", key_path=bundles.private_key,
                            dynamic_batch=True)
    site.push(wide, f"oci://{site.registry.address}/edge/mlp:8")
    site.relay.arm(cut_after=wide.stat().st_size // 2, cuts=1, die_after_cut=True)
    with pytest.raises(DeploymentFailedError) as err:
        site.deploy(f"oci://{site.relay.address}/edge/mlp:8", site.a)
    assert "registry: " in err.value.reports[0].error
    assert site.active(site.a) == before  # still serving, READY
    with site.a.client() as c:
        assert 8 not in {v.version for v in c.models("mlp")}
    assert not list((site.a.state_dir / "incoming").glob("*"))  # the cut pull is gone
    # the registry is back (here: reached directly): the next pull starts afresh
    reports = site.deploy(f"oci://{site.registry.address}/edge/mlp:8", site.a)
    assert reports[0].ok, reports
    assert site.active(site.a) == 8
    assert not list((site.a.state_dir / "incoming").glob("*"))
