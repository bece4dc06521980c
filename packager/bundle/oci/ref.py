"""OCI references (``oci://HOST[:PORT]/REPO:TAG`` or ``...@sha256:HEX``) and the registry
allow list, parsed strictly. Pure values: no network, no gRPC.

Grammar (a subset of the distribution reference grammar, refused otherwise):

- HOST: DNS labels of ``[A-Za-z0-9-]`` (no leading or trailing ``-``) joined by ``.``, or an
  IPv4 address; at most 253 characters. PORT: 1-65535.
- REPO: ``/``-separated components of ``[a-z0-9]+`` joined by ``.``, ``_``, ``__`` or ``-``
  runs; at most 255 characters.
- TAG: ``[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}``; DIGEST: ``sha256:`` and 64 lowercase hex digits.
  A tag or a digest (or both: the digest wins) is required.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from packager.bundle.errors import ErrorCode, UsageError

SCHEME = "oci://"
MAX_REFERENCE_CHARS = 1024
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*$")
_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_DIGEST = re.compile(r"^sha256:[a-f0-9]{64}$")
_EXAMPLE = "oci://registry.example.com:5000/models/resnet:3"


class OciReferenceError(UsageError):
    """An OCI reference or an allow-list entry is malformed."""

    code = ErrorCode.REFERENCE


class RegistryNotAllowedError(OciReferenceError):
    """A reference outside the agent's ``[registry] allow`` list."""

    code = ErrorCode.REGISTRY_NOT_ALLOWED


def is_reference(text: str) -> bool:
    """True when ``text`` names an OCI reference (starts with ``oci://``)."""
    return text.startswith(SCHEME)


def _check_host(host: str, port: str | None, text: str) -> None:
    if not host or len(host) > 253 or not _HOST.match(host):
        raise OciReferenceError(f"{text!r}: {host!r} is not a registry host name or IPv4 "
                                f"address; write e.g. {_EXAMPLE}")
    if port is not None and (not port.isdigit() or not 1 <= int(port) <= 65535
                             or port != str(int(port))):
        raise OciReferenceError(f"{text!r}: port {port!r} is not a number in 1-65535")


def _check_repository(repo: str, text: str) -> None:
    if not repo or len(repo) > 255:
        raise OciReferenceError(f"{text!r}: the repository must be 1-255 characters; write "
                                f"e.g. {_EXAMPLE}")
    for comp in repo.split("/"):
        if not _COMPONENT.match(comp):
            raise OciReferenceError(
                f"{text!r}: repository component {comp!r} must be lowercase letters and "
                "digits, joined by '.', '_', '__' or '-'")


def _split_registry(rest: str, text: str) -> tuple[str, str | None, str]:
    """``HOST[:PORT]/PATH`` -> (host, port, path)."""
    registry, sep, path = rest.partition("/")
    if not sep:
        raise OciReferenceError(f"{text!r} has no repository; write e.g. {_EXAMPLE}")
    host, colon, port = registry.partition(":")
    _check_host(host, port if colon else None, text)
    return host, port if colon else None, path


@dataclass(frozen=True)
class OciReference:
    """A parsed reference; ``digest`` set means "exactly these bytes"."""

    host: str
    port: int | None
    repository: str
    tag: str | None = None
    digest: str | None = None

    @property
    def registry(self) -> str:
        """``HOST[:PORT]`` as written (what credentials and the allow list are keyed by)."""
        return self.host if self.port is None else f"{self.host}:{self.port}"

    @property
    def reference(self) -> str:
        """What the registry API takes after ``/manifests/``: the digest, else the tag."""
        return self.digest or self.tag or ""

    def with_digest(self, digest: str) -> OciReference:
        """The same repository pinned to ``digest`` (the tag kept for messages)."""
        if not _DIGEST.match(digest):
            raise OciReferenceError(f"{digest!r} is not a sha256 digest")
        return OciReference(self.host, self.port, self.repository, self.tag, digest)

    def pinned(self) -> str:
        """``oci://HOST[:PORT]/REPO@DIGEST`` (requires a digest)."""
        if not self.digest:
            raise OciReferenceError(f"{self} has no digest")
        return f"{SCHEME}{self.registry}/{self.repository}@{self.digest}"

    def __str__(self) -> str:
        out = f"{SCHEME}{self.registry}/{self.repository}"
        if self.tag:
            out += f":{self.tag}"
        if self.digest:
            out += f"@{self.digest}"
        return out


def parse_reference(text: str) -> OciReference:
    """Parse ``oci://HOST[:PORT]/REPO[:TAG][@sha256:HEX]`` (OciReferenceError: one line)."""
    if not isinstance(text, str) or len(text) > MAX_REFERENCE_CHARS:
        raise OciReferenceError(f"an OCI reference is at most {MAX_REFERENCE_CHARS} characters")
    if not text.startswith(SCHEME):
        raise OciReferenceError(f"{text!r} is not an OCI reference; write e.g. {_EXAMPLE}")
    if any(c.isspace() or ord(c) < 0x21 or ord(c) > 0x7E for c in text):
        raise OciReferenceError(f"{text!r}: an OCI reference has no spaces or control or "
                                "non-ASCII characters")
    rest = text[len(SCHEME):]
    if any(c in rest for c in "?#\\"):
        raise OciReferenceError(f"{text!r}: '?', '#' and '\\' are not allowed in a reference")
    host, port, path = _split_registry(rest, text)
    digest: str | None = None
    if "@" in path:
        path, _, digest = path.partition("@")
        if not _DIGEST.match(digest):
            raise OciReferenceError(f"{text!r}: the digest must be sha256: and 64 lowercase hex "
                                    "digits")
    tag: str | None = None
    last = path.rsplit("/", 1)[-1]
    if ":" in last:
        path, _, tag = path.rpartition(":")
        if not _TAG.match(tag):
            raise OciReferenceError(f"{text!r}: tag {tag!r} must be 1-128 of [A-Za-z0-9_.-], "
                                    "not starting with '.' or '-'")
    _check_repository(path, text)
    if tag is None and digest is None:
        raise OciReferenceError(f"{text!r} names no tag or digest; add ':TAG' (e.g. ':3') or "
                                "'@sha256:...'")
    return OciReference(host, int(port) if port else None, path, tag, digest)


@dataclass(frozen=True)
class AllowEntry:
    """``HOST[:PORT][/PREFIX]``: that registry (exactly that port), repositories under
    ``PREFIX`` (the repository itself or below it; every repository without a prefix)."""

    registry: str
    prefix: str

    def allows(self, ref: OciReference) -> bool:
        """True when ``ref`` is on this registry and under this prefix."""
        if ref.registry.lower() != self.registry.lower():
            return False
        return (not self.prefix or ref.repository == self.prefix
                or ref.repository.startswith(self.prefix + "/"))

    def __str__(self) -> str:
        return f"{self.registry}/{self.prefix}" if self.prefix else self.registry


def parse_allow_entry(text: str, where: str = "[registry] allow") -> AllowEntry:
    """Parse one allow-list entry (OciReferenceError naming ``where``)."""
    if not isinstance(text, str) or not text or len(text) > 512 or text.startswith(SCHEME):
        raise OciReferenceError(f"{where}: {text!r} must be 'host[:port]/prefix' (no oci://), "
                                "e.g. 'registry.local:5000/models'")
    registry, _, prefix = text.partition("/")
    host, colon, port = registry.partition(":")
    try:
        _check_host(host, port if colon else None, text)
        if prefix:
            _check_repository(prefix.rstrip("/"), text)
    except OciReferenceError as exc:
        raise OciReferenceError(f"{where}: {exc}") from None
    return AllowEntry(registry, prefix.rstrip("/"))


def parse_registry_address(text: str, where: str = "[registry] insecure") -> str:
    """``HOST[:PORT]`` as written (OciReferenceError naming ``where``)."""
    if not isinstance(text, str) or "/" in text or not text:
        raise OciReferenceError(f"{where}: {text!r} must be 'host:port' (no path, no scheme)")
    host, colon, port = text.partition(":")
    try:
        _check_host(host, port if colon else None, text)
    except OciReferenceError as exc:
        raise OciReferenceError(f"{where}: {exc}") from None
    return text


@dataclass(frozen=True)
class RegistryPolicy:
    """Where an agent may pull from, and which registries speak plain HTTP."""

    allow: tuple[AllowEntry, ...] = ()
    insecure: tuple[str, ...] = ()

    @classmethod
    def parse(cls, allow: Iterable[str], insecure: Iterable[str]) -> RegistryPolicy:
        """Build from config strings (OciReferenceError on a malformed entry)."""
        return cls(tuple(parse_allow_entry(a) for a in allow),
                   tuple(parse_registry_address(i) for i in insecure))

    def check(self, ref: OciReference) -> None:
        """RegistryNotAllowedError (one line saying how to allow it) unless ``ref`` is
        allowed."""
        if not self.allow:
            raise RegistryNotAllowedError(
                f"this agent pulls from no registry: {ref} refused; add "
                f"'{ref.registry}/{ref.repository}' (or a prefix of it) to [registry] allow "
                "in the agent's config, then reload it (SIGHUP; systemctl reload edge-agent) "
                "or start it with --registry-allow")
        if not any(e.allows(ref) for e in self.allow):
            raise RegistryNotAllowedError(
                f"{ref} is not under any [registry] allow entry of this agent "
                f"({', '.join(str(e) for e in self.allow)}); add "
                f"'{ref.registry}/{ref.repository}' to allow it, then reload the agent "
                "(SIGHUP)")

    def check_redirect(self, url: str) -> None:
        """RegistryNotAllowedError naming the host unless a registry's redirect to ``url``
        may be followed: its ``host[:port]`` is the registry of an allow entry (a prefix
        does not matter: storage hosts serve blobs, not repositories; an entry without a
        prefix names such a host), over HTTPS, or plain HTTP where ``insecure`` lists it."""
        from urllib.parse import urlsplit

        try:
            parts = urlsplit(url)
            host, port = (parts.hostname or "").lower(), parts.port
        except ValueError:
            raise RegistryNotAllowedError(f"a registry redirected to {url[:200]!r}, which is "
                                          "not a URL; refused") from None
        names = {host if port is None else f"{host}:{port}"}
        if port == {"https": 443, "http": 80}.get(parts.scheme):
            names.add(host)
        allowed = {e.registry.lower() for e in self.allow}
        shown = next(iter(sorted(names, key=len, reverse=True)))
        if parts.scheme not in ("https", "http") or not names & allowed:
            raise RegistryNotAllowedError(
                f"a registry redirected to {shown}, which is not in this agent's [registry] "
                f"allow; refused. If {shown} is the registry's storage, add '{shown}' to "
                "[registry] allow and reload the agent (SIGHUP)")
        if parts.scheme == "http" and not names & {i.lower() for i in self.insecure}:
            raise RegistryNotAllowedError(
                f"a registry redirected to plain HTTP at {shown}; refused (list it in "
                "[registry] insecure if it is a lab server)")

    def is_insecure(self, ref: OciReference) -> bool:
        """True when ``ref``'s registry is listed as plain HTTP."""
        return ref.registry.lower() in (i.lower() for i in self.insecure)
