"""mTLS on the management API: a client certificate signed by the configured CA replaces the
token; no certificate (or one from another CA) gets no answer. Real certificates, real gRPC."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from edge_agent.client.agent_client import AgentClient, ClientTls, ManagementError
from edge_agent.core.dataplane import DataPlane
from edge_agent.deploy.manager import ModelManager
from edge_agent.management.auth import TlsFiles
from edge_agent.management.identity import AgentIdentity
from edge_agent.management.server import ManagementServer
from edge_agent.management.servicer import ManagementServicer
from edge_agent.state import StateStore

ROOT = Path(__file__).resolve().parents[2]


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write(path: Path, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> None:
    path.with_suffix(".key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    path.with_suffix(".pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _ca(root: Path, cn: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    _write(root / cn, key, cert)
    return key, cert


def _leaf(root: Path, cn: str, ca: tuple[ec.EllipticCurvePrivateKey, x509.Certificate]) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(ca[1].subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]),
                           critical=False)
            .sign(ca[0], hashes.SHA256()))
    _write(root / cn, key, cert)


@pytest.fixture(scope="module")
def mtls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("mtls")
    ca = _ca(root, "fleet-ca")
    other = _ca(root, "other-ca")
    _leaf(root, "agent", ca)
    _leaf(root, "console", ca)
    _leaf(root, "stranger", other)
    state = root / "state"
    dataplane = DataPlane(state, autoload=False)
    store = StateStore.open(state)
    manager = ModelManager(dataplane, store)
    manager.start()
    servicer = ManagementServicer(manager, AgentIdentity(agent_id="mtls-agent", name="mtls"))
    server = ManagementServer(servicer, "127.0.0.1:0", token="unused-token",
                              tls=TlsFiles(cert=root / "agent.pem", key=root / "agent.key",
                                           client_ca=root / "fleet-ca.pem"))
    address = server.start()
    try:
        yield address, root
    finally:
        server.stop(0)
        dataplane.close()
        store.close()


def test_client_certificate_replaces_the_token(mtls_server: tuple[str, Path]) -> None:
    address, root = mtls_server
    tls = ClientTls(ca=root / "fleet-ca.pem", cert=root / "console.pem",
                    key=root / "console.key", server_name="localhost")
    with AgentClient(address, tls=tls) as client:
        assert client.info().agent_id == "mtls-agent"


@pytest.mark.parametrize("who", [None, "stranger"])
def test_no_or_foreign_certificate_gets_no_answer(mtls_server: tuple[str, Path],
                                                  who: str | None) -> None:
    address, root = mtls_server
    tls = ClientTls(ca=root / "fleet-ca.pem", server_name="localhost",
                    cert=root / f"{who}.pem" if who else None,
                    key=root / f"{who}.key" if who else None)
    with AgentClient(address, tls=tls, timeout_s=5) as client, \
            pytest.raises(ManagementError):
        client.info()


@pytest.mark.parametrize("where", ["fleet", "agent"])
def test_console_reaches_an_mtls_agent_from_its_config_file(mtls_server: tuple[str, Path],
                                                             tmp_path: Path, where: str) -> None:
    """`edge-console status` with the TLS files in the console config ([tls] or per agent)."""
    address, root = mtls_server
    if where == "fleet":
        config = (f'[tls]\nca = "{root}/fleet-ca.pem"\ncert = "{root}/console.pem"\n'
                  f'key = "{root}/console.key"\nserver_name = "localhost"\n')
    else:
        config = (f'[[agents]]\naddress = "{address}"\ntls_ca = "{root}/fleet-ca.pem"\n'
                  f'tls_cert = "{root}/console.pem"\ntls_key = "{root}/console.key"\n'
                  'tls_server_name = "localhost"\n')
    cfg = tmp_path / "console.toml"
    cfg.write_text(config)
    run = subprocess.run(
        [sys.executable, "-m", "console.cli", "status", "--agent", address, "--json",
         "--config", str(cfg)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)[0]["info"]["agent_id"] == "mtls-agent"


def test_console_config_refuses_half_a_client_certificate(tmp_path: Path) -> None:
    from console.config import load_settings
    from console.errors import ConsoleConfigError

    (tmp_path / "ca.pem").write_text("x")
    (tmp_path / "c.pem").write_text("x")
    cfg = tmp_path / "console.toml"
    cfg.write_text('[tls]\nca = "ca.pem"\ncert = "c.pem"\n')
    with pytest.raises(ConsoleConfigError, match="both cert and key"):
        load_settings(cfg)
    cfg.write_text('[tls]\nca = "missing.pem"\n')
    with pytest.raises(ConsoleConfigError, match="does not exist"):
        load_settings(cfg)
