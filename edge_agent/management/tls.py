"""The agent's own TLS identity: a private key and a self-signed certificate in the state dir.

Created on first start (``STATE_DIR/tls/key.pem`` and ``cert.pem``, mode 0600, directory
0700) and reused afterwards; consoles pin the certificate's SHA-256 fingerprint on first contact
(SSH-style), so the certificate needs no CA. Every certificate carries the fixed DNS name
:data:`SERVER_NAME`, which clients ask for (``grpc.ssl_target_name_override``) whatever address
they dial: the trust is the pin, not the host name.

Fingerprints are written as ``SHA256:AB:CD:...`` (the SHA-256 of the DER certificate, as
``openssl x509 -in cert.pem -noout -fingerprint -sha256`` prints it).
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import ipaddress
import logging
import os
import shutil
import socket
import ssl
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edge_agent.config.management import ManagementConfig, TlsFiles
from edge_agent.errors import ConfigError

if TYPE_CHECKING:
    from cryptography import x509

log = logging.getLogger(__name__)

SERVER_NAME = "edge-agent"  # the DNS name in every agent certificate; clients ask for it
TLS_DIR = "tls"
CERT_FILE = "cert.pem"
KEY_FILE = "key.pem"
VALID_DAYS = 3650
_PREFIX = "SHA256:"


def fingerprint(cert_pem: bytes | str) -> str:
    """``SHA256:AB:CD:...`` of the first certificate in ``cert_pem``."""
    text = cert_pem.decode() if isinstance(cert_pem, bytes) else cert_pem
    start = text.find("-----BEGIN CERTIFICATE-----")
    end = text.find("-----END CERTIFICATE-----", start)
    if start < 0 or end < 0:
        raise ConfigError("not a PEM certificate (no BEGIN/END CERTIFICATE block)")
    der = ssl.PEM_cert_to_DER_cert(text[start:end + len("-----END CERTIFICATE-----")] + "\n")
    digest = hashlib.sha256(der).hexdigest().upper()
    return _PREFIX + ":".join(digest[i:i + 2] for i in range(0, len(digest), 2))


def normalize_fingerprint(text: str) -> str:
    """``text`` (any case, with or without ``SHA256:`` and colons) in the canonical form;
    ConfigError when it is not 32 hex bytes."""
    raw = text.strip()
    if raw.upper().startswith(_PREFIX):
        raw = raw[len(_PREFIX):]
    digest = raw.replace(":", "").upper()
    if len(digest) != 64 or any(c not in "0123456789ABCDEF" for c in digest):
        raise ConfigError(f"{text!r} is not a SHA-256 certificate fingerprint "
                          "(expected SHA256: and 32 hex bytes, e.g. from `edge-agent token`)")
    return _PREFIX + ":".join(digest[i:i + 2] for i in range(0, len(digest), 2))


def tls_dir(state_dir: str | os.PathLike[str]) -> Path:
    """Where the agent keeps its key and certificate."""
    return Path(state_dir) / TLS_DIR


def _san_names(hosts: Iterable[str]) -> list[x509.GeneralName]:
    from cryptography import x509

    names: list[x509.GeneralName] = [x509.DNSName(SERVER_NAME)]
    seen: set[str] = {SERVER_NAME}
    for host in (socket.gethostname(), "localhost", "127.0.0.1", *hosts):
        if not host or host in seen:
            continue
        seen.add(host)
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def _generate(directory: Path, hosts: Iterable[str]) -> None:
    """Write a new EC P-256 key and a self-signed certificate into ``directory``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, SERVER_NAME),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, socket.gethostname()[:64]
                                         or "edge-agent")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
            .add_extension(x509.SubjectAlternativeName(_san_names(hosts)),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    for filename, data in ((KEY_FILE, key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption())), (CERT_FILE, cert.public_bytes(
                serialization.Encoding.PEM))):
        fd = os.open(directory / filename, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())


def load_or_create(state_dir: str | os.PathLike[str], hosts: Iterable[str] = ()
                   ) -> tuple[Path, Path]:
    """(cert, key) paths of the agent's identity, created on first use.

    ``hosts``: extra names/addresses for the certificate (the advertised addresses); they
    only matter to clients that check host names, since consoles pin the fingerprint.
    Creation is atomic (a directory renamed into place), so a ``token`` command running beside
    a starting agent ends up with the same certificate.
    """
    final = tls_dir(state_dir)
    cert, key = final / CERT_FILE, final / KEY_FILE
    if cert.is_file() and key.is_file():
        return cert, key
    if final.exists():
        raise ConfigError(f"{final} exists but does not hold {CERT_FILE} and {KEY_FILE}; "
                          "remove the directory to let the agent create a new certificate "
                          "(consoles will then refuse it until its old pin is removed)")
    try:
        staging = Path(tempfile.mkdtemp(prefix=".tls-", dir=state_dir))
    except OSError as exc:
        raise ConfigError(f"cannot create the agent's TLS certificate in {state_dir}: "
                          f"{exc.strerror or exc}") from None
    try:
        os.chmod(staging, 0o700)
        _generate(staging, hosts)
        try:
            os.rename(staging, final)
        except OSError:
            if not (cert.is_file() and key.is_file()):  # not another process winning the race
                raise
    except OSError as exc:
        raise ConfigError(f"cannot create the agent's TLS certificate in {final}: "
                          f"{exc.strerror or exc}") from None
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(staging)
    return cert, key


def fingerprint_of(state_dir: str | os.PathLike[str]) -> str:
    """The fingerprint of the agent's certificate in ``state_dir`` (created if missing)."""
    cert, _ = load_or_create(state_dir)
    return fingerprint(cert.read_bytes())


def describe_tls(options: Any, state_dir: str | os.PathLike[str]) -> str:
    """One phrase for the ready line: ``TLS certificate SHA256:...`` or ``PLAINTEXT``.

    ``options`` is the agent's ManagementConfig (``insecure``, ``tls``, ``client_ca``).
    """
    if options.insecure:
        return "management PLAINTEXT (--insecure)"
    cert = options.tls.cert if options.tls is not None else load_or_create(state_dir)[0]
    mtls = " + client certificates" if (options.client_ca or (
        options.tls is not None and options.tls.client_ca)) else ""
    return f"management TLS{mtls}, certificate {fingerprint(cert.read_bytes())}"


def server_tls(options: ManagementConfig, interfaces: Sequence[str],
               state_dir: Path) -> TlsFiles | None:
    """The management API's TLS files: none (``insecure``), the configured ones, or the agent's
    self-signed identity in ``state_dir`` (created on first start, naming the addresses of
    ``interfaces``, or of every interface when empty)."""
    if options.insecure:
        log.warning("management API in PLAINTEXT (--insecure): anyone on the network who "
                    "sees a call can take the token")
        return None
    if options.tls is not None:
        return options.tls
    from edge_agent.discovery import advertised_addresses

    host = (options.address or "").rpartition(":")[0].strip("[]")
    hosts = [*advertised_addresses(interfaces or None),
             *([host] if host and host not in ("0.0.0.0", "::") else [])]
    cert, key = load_or_create(state_dir, hosts)
    return TlsFiles(cert=cert, key=key, client_ca=options.client_ca)
