"""Ed25519 keys and detached signatures over the canonical manifest bytes."""

from __future__ import annotations

import os
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from packager.bundle.errors import KeyFileError

PRIVATE_KEY_NAME = "edge-pack.key"
PUBLIC_KEY_NAME = "edge-pack.pub"
SIGNATURE_SIZE = 64


def generate_keypair(out_dir: Path) -> tuple[Path, Path]:
    """Write a new Ed25519 key pair (PEM; private key mode 0600) into ``out_dir``.

    Refuses to overwrite existing key files. Returns (private_path, public_path).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    priv_path, pub_path = out_dir / PRIVATE_KEY_NAME, out_dir / PUBLIC_KEY_NAME
    for p in (priv_path, pub_path):
        if p.exists():
            raise KeyFileError(f"{p} already exists; refusing to overwrite a key (move it away "
                               "or pick another --out)")
    key = Ed25519PrivateKey.generate()
    priv_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())
    pub_pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                            serialization.PublicFormat.SubjectPublicKeyInfo)
    fd = os.open(priv_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(priv_pem)
    os.chmod(priv_path, 0o600)
    pub_path.write_bytes(pub_pem)
    return priv_path, pub_path


def _read_key_file(path: Path, what: str) -> bytes:
    path = Path(path)
    try:
        return path.read_bytes()
    except FileNotFoundError as exc:
        raise KeyFileError(f"{what} file {path} does not exist") from exc
    except OSError as exc:
        raise KeyFileError(f"cannot read {what} file {path}: {exc.strerror}") from exc


def load_private_key(path: Path) -> Ed25519PrivateKey:
    """Load a PEM (PKCS8, unencrypted) Ed25519 private key; KeyFileError when it is not one."""
    data = _read_key_file(path, "private key")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise KeyFileError(f"{path} is not an unencrypted PEM private key (make one with "
                           "`edge-pack keygen --out DIR`)") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyFileError(f"{path} holds a {type(key).__name__}, not an Ed25519 private key")
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    """Load a PEM Ed25519 public key; KeyFileError when it is not one."""
    data = _read_key_file(path, "public key")
    if b"PRIVATE KEY-----" in data:
        raise KeyFileError(f"{path} is a private key; give the public key instead (the .pub "
                           "file written next to it by `edge-pack keygen`)")
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise KeyFileError(f"{path} is not a PEM public key (the .pub file written by "
                           "`edge-pack keygen`)") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise KeyFileError(f"{path} holds a {type(key).__name__}, not an Ed25519 public key")
    return key


def sign(key: Ed25519PrivateKey, data: bytes) -> bytes:
    """The raw 64-byte Ed25519 signature of ``data``."""
    return key.sign(data)


def verify_signature(key: Ed25519PublicKey, signature: bytes, data: bytes) -> bool:
    """True when ``signature`` is ``key``'s valid signature of ``data``."""
    if len(signature) != SIGNATURE_SIZE:
        return False
    try:
        key.verify(signature, data)
    except InvalidSignature:
        return False
    return True


def key_id(key: Ed25519PublicKey) -> str:
    """A short fingerprint of a public key (first 16 hex chars of sha256 of the raw key)."""
    import hashlib

    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]
