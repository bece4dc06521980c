"""Talking to an OCI registry through the ORAS client library (oras-py): manifests by tag or
digest (size-capped, digest-checked), blob upload, and blob download with retries and resume
of a cut transfer. ``oras`` is imported here only, when a registry is used.

Retries: a failed request (no answer, a reset, a 5xx, 429) is tried again ``retries`` times
with a doubling pause; a download that was cut resumes from the bytes already written with an
HTTP Range request (the attempt count starts again whenever bytes arrived).

A :class:`TransferGuard` ends a transfer from another thread: at its overall deadline or when
stopped (an agent shutting down). The socket of the response being read is shut down, so a
blocked read returns at once instead of after the per-read timeout. Redirects are followed
only where ``RegistryOptions.redirect_check`` allows (an agent: its ``[registry] allow``).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packager.bundle.errors import (
    ArtifactNotFoundError,
    ArtifactRejectedError,
    RegistryAuthError,
    RegistryError,
    RegistryUnavailableError,
    TransferStoppedError,
)
from packager.bundle.oci.layout import MAX_MANIFEST_BYTES, digest_of
from packager.bundle.oci.ref import OciReference

ACCEPT = ", ".join(("application/vnd.oci.image.index.v1+json",
                    "application/vnd.oci.image.manifest.v1+json"))
CHUNK = 1 << 20
DOWNLOAD_CHUNK = 16 << 10  # small reads: a cut transfer keeps all but the last one
UPLOAD_CHUNK = 16 << 20
MAX_REDIRECTS = 5
Progress = Callable[[int, int], None]
RedirectCheck = Callable[[str], None]
"""Called with each redirect's absolute URL before it is followed; raises to refuse it."""


@dataclass(frozen=True)
class Credentials:
    """A registry user name and password (or token)."""

    username: str
    password: str


def docker_config_path() -> Path:
    """``$DOCKER_CONFIG/config.json``, else ``~/.docker/config.json`` (docker's rule)."""
    base = os.environ.get("DOCKER_CONFIG")
    return (Path(base) if base else Path.home() / ".docker") / "config.json"


def credentials_from_config(path: Path, registry: str, *, required: bool = False
                            ) -> Credentials | None:
    """The ``auths`` entry of a docker-style config.json for ``registry`` (``auth`` base64
    ``user:password``, or ``username``/``password``); None when there is none. Credential
    helpers (``credsStore``, ``credHelpers``) are not run."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        if required:
            raise RegistryAuthError(f"registry credentials file {path} does not exist") from None
        return None
    except OSError as exc:
        raise RegistryAuthError(f"cannot read registry credentials {path}: "
                                f"{exc.strerror or exc}") from None
    try:
        cfg = json.loads(raw)
        auths = cfg.get("auths", {}) if isinstance(cfg, dict) else None
        if not isinstance(auths, dict):
            raise ValueError
    except ValueError:
        raise RegistryAuthError(f"{path} is not a docker config.json (JSON with 'auths')"
                                ) from None
    for key in (registry, f"https://{registry}", f"http://{registry}",
                f"https://{registry}/v2/"):
        entry = auths.get(key)
        if not isinstance(entry, dict):
            continue
        if isinstance(entry.get("auth"), str) and entry["auth"]:
            try:
                user, sep, pw = base64.b64decode(entry["auth"]).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                sep = ""
            if not sep:
                raise RegistryAuthError(f"{path}: auths[{key!r}].auth is not base64 of "
                                        "'user:password'")
            return Credentials(user, pw)
        if isinstance(entry.get("username"), str) and isinstance(entry.get("password"), str):
            return Credentials(entry["username"], entry["password"])
    return None


@dataclass(frozen=True)
class RegistryOptions:
    """How to reach a registry: plain HTTP (``insecure``), credentials, retry policy."""

    insecure: bool = False
    credentials: Credentials | None = None
    ca_file: Path | None = None  # a CA bundle (PEM) to trust instead of the system's
    retries: int = 4
    backoff_s: float = 0.5
    timeout_s: float = 30.0  # per connect / per read
    redirect_check: RedirectCheck | None = None  # None: follow any redirect (edge-pack)
    guard: TransferGuard | None = None  # overall deadline, stop from another thread


class TransferGuard:
    """Ends the transfers of one pull from another thread: when ``deadline_s`` has passed
    since :meth:`start`, or on :meth:`stop`. The response being read has its socket shut
    down, so a read blocked on a silent registry returns at once; every later step raises
    (RegistryUnavailableError past the deadline, TransferStoppedError when stopped)."""

    def __init__(self, deadline_s: float | None = None, *,
                 deadline_hint: str = "") -> None:
        self.deadline_s = deadline_s
        self._hint = deadline_hint  # how to change the deadline, for its message
        self._stopped = threading.Event()
        self._error: Exception | None = None
        self._lock = threading.Lock()
        self._socks: set[socket.socket] = set()
        self._timer: threading.Timer | None = None
        self._started: float | None = None

    def start(self) -> TransferGuard:
        """Start the deadline's clock (no-op without a deadline)."""
        if self.deadline_s is not None and self._timer is None:
            self._started = time.monotonic()
            hint = f" ({self._hint})" if self._hint else ""
            self._timer = threading.Timer(self.deadline_s, self._end, args=(
                RegistryUnavailableError(f"the pull did not finish within its deadline of "
                                         f"{self.deadline_s:g} s{hint}; refused"),))
            self._timer.daemon = True
            self._timer.start()
        return self

    def close(self) -> None:
        """Cancel the deadline's clock (the transfer is over)."""
        if self._timer is not None:
            self._timer.cancel()

    def __enter__(self) -> TransferGuard:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stop(self, reason: str) -> None:
        """End the transfer now with TransferStoppedError(``reason``)."""
        self._end(TransferStoppedError(reason))

    @property
    def stopped(self) -> bool:
        """True once the deadline passed or :meth:`stop` was called."""
        return self._stopped.is_set()

    def _end(self, error: Exception) -> None:
        with self._lock:
            if self._error is None:
                self._error = error
            self._stopped.set()
            socks = list(self._socks)
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def check(self) -> None:
        """Raise the reason the transfer was ended, if it was."""
        if self._stopped.is_set():
            assert self._error is not None
            raise self._error

    def sleep(self, seconds: float) -> None:
        """Pause ``seconds`` (a retry's back-off), or less when ended; then :meth:`check`."""
        self._stopped.wait(seconds)
        self.check()

    def remaining(self, cap: float) -> float:
        """``cap``, or less when the deadline comes first (at least 0.1 s)."""
        if self.deadline_s is None or self._started is None:
            return cap
        left = self.deadline_s - (time.monotonic() - self._started)
        return max(0.1, min(cap, left))

    @contextlib.contextmanager
    def reading(self, response: Any) -> Iterator[None]:
        """While reading ``response``'s body: shut its socket down if the transfer ends."""
        sock = _socket_of(response)
        if sock is not None:
            with self._lock:
                self._socks.add(sock)
        try:
            self.check()
            yield
        except Exception:
            self.check()  # a read cut by the guard: its reason, not "connection reset"
            raise
        finally:
            if sock is not None:
                with self._lock:
                    self._socks.discard(sock)


def _socket_of(response: Any) -> socket.socket | None:
    """The socket under a streamed requests response (None when it cannot be found)."""
    raw: Any = getattr(response, "raw", None)
    conn = getattr(raw, "connection", None) or getattr(raw, "_connection", None)
    sock = getattr(conn, "sock", None)
    if isinstance(sock, socket.socket):
        return sock
    with contextlib.suppress(AttributeError):
        found = raw._fp.fp.raw._sock  # http.client's reader under urllib3
        if isinstance(found, socket.socket):
            return found
    return None


def _registry_class() -> Any:
    import oras.provider
    import requests

    class _Registry(oras.provider.Registry):  # type: ignore[misc]  # oras ships no types
        """oras' Registry with a timeout on every request and without its own retry loop
        (minutes of sleeps); :class:`RegistryClient` retries with a short policy."""

        timeout_s: float = 30.0
        preemptive: dict[str, str] = {}  # replaced per instance (RegistryClient._make)

        def do_request(self, url: str, method: str = "GET", data: Any = None,
                       headers: dict[str, str] | None = None, json: Any = None,
                       stream: bool = False) -> requests.Response:
            if self.preemptive:  # basic auth: send it at once (no 401 round trip per call)
                headers = {**(headers or {}), **self.preemptive}
            unwrapped = oras.provider.Registry.do_request.__wrapped__
            response: requests.Response = unwrapped(self, url, method, data, headers, json,
                                                    stream)
            return response

    return _Registry


def _tls_reason(exc: BaseException) -> str:
    text = str(exc)
    for known in ("CERTIFICATE_VERIFY_FAILED", "WRONG_VERSION_NUMBER", "hostname mismatch"):
        if known.lower() in text.lower():
            return known.lower().replace("_", " ")
    return exc.__class__.__name__


class _TimeoutSession:
    """Wraps a requests.Session so that every call has a timeout (cut to what is left of
    the guard's deadline), and redirects are checked before they are followed."""

    def __init__(self, session: Any, options: RegistryOptions) -> None:
        self._session = session
        self._timeout_s = options.timeout_s
        self._guard = options.guard
        session.max_redirects = MAX_REDIRECTS
        if options.redirect_check is not None:
            check = options.redirect_check
            plain = session.get_redirect_target

            def redirect_target(response: Any) -> str | None:
                from urllib.parse import urljoin

                target: str | None = plain(response)
                if target is not None:
                    check(urljoin(response.url, target))
                return target

            session.get_redirect_target = redirect_target

    def request(self, *args: Any, **kwargs: Any) -> Any:
        read = self._timeout_s
        if self._guard is not None:
            self._guard.check()
            read = self._guard.remaining(read)
        kwargs.setdefault("timeout", (min(10.0, read), read))
        return self._session.request(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)


class RegistryClient:
    """One repository on one registry."""

    def __init__(self, ref: OciReference, options: RegistryOptions) -> None:
        import requests

        self.ref = ref
        self.options = options
        self._scheme = "http" if options.insecure else "https"
        self._oras = self._make("token")
        if self._challenge().lower().startswith("basic"):  # htpasswd: no token service
            if options.credentials is None:
                raise RegistryAuthError(f"{ref.registry} wants credentials (basic auth); log "
                                        "in (a docker config.json) or pass "
                                        "--username/--password-stdin")
            self._oras = self._make("basic")
            user, password = options.credentials.username, options.credentials.password
            self._oras.preemptive = {"Authorization": "Basic " + base64.b64encode(
                f"{user}:{password}".encode()).decode()}
        self._container = self._oras.get_container(f"{ref.registry}/{ref.repository}:x")
        self._transient = (requests.ConnectionError, requests.Timeout,
                           requests.exceptions.ChunkedEncodingError,
                           requests.exceptions.ContentDecodingError)

    def _make(self, backend: str) -> Any:
        """An oras Registry with ``backend`` auth, our timeouts and the credentials."""
        verify: bool | str = str(self.options.ca_file) if self.options.ca_file else True
        reg = _registry_class()(hostname=self.ref.registry, insecure=self.options.insecure,
                                tls_verify=verify, auth_backend=backend)
        reg.preemptive = {}
        timed = _TimeoutSession(reg.session, self.options)
        reg.session = timed
        reg.auth.session = timed
        if self.options.credentials is not None:
            reg.auth.set_basic_auth(self.options.credentials.username,
                                    self.options.credentials.password)
        return reg

    def _challenge(self) -> str:
        """The registry's ``WWW-Authenticate`` on ``/v2/`` ("" when open or unreachable:
        the calls that follow report that)."""
        try:
            r = self._oras.session.request("GET", f"{self._scheme}://{self.ref.registry}/v2/",
                                           verify=self._oras._tls_verify)
        except Exception:  # reported by the real calls, with their retries
            return ""
        with contextlib.suppress(Exception):
            r.close()
        return str(r.headers.get("Www-Authenticate", "")) if r.status_code == 401 else ""

    # -- requests --------------------------------------------------------------------------
    def _pause(self, attempt: int) -> None:
        """The back-off before retry ``attempt`` (1, 2, ...); cut short by the guard."""
        seconds = self.options.backoff_s * 2 ** (attempt - 1)
        if self.options.guard is None:
            time.sleep(seconds)
        else:
            self.options.guard.sleep(seconds)

    def _reading(self, response: Any) -> contextlib.AbstractContextManager[None]:
        """The guard's watch over ``response``'s body (nothing without a guard)."""
        if self.options.guard is None:
            return contextlib.nullcontext()
        return self.options.guard.reading(response)

    def _where(self) -> str:
        return f"{self.ref.registry}/{self.ref.repository}"

    def _request(self, method: str, url: str, what: str, *, headers: dict[str, str] | None
                 = None, data: Any = None, stream: bool = False, ok: tuple[int, ...] = (200,)
                 ) -> Any:
        """One request with retries; errors become RegistryError subclasses."""
        import requests

        last = ""
        for attempt in range(self.options.retries + 1):
            if attempt:
                self._pause(attempt)
            try:
                r = self._oras.do_request(url, method, data=data, headers=dict(headers or {}),
                                          stream=stream)
            except requests.exceptions.SSLError as exc:
                raise RegistryUnavailableError(
                    f"{what}: TLS with {self.ref.registry} failed ({_tls_reason(exc)}); a "
                    "private CA: --ca-file (agents: [registry] ca_file); a lab registry on "
                    "plain HTTP: --insecure (agents: [registry] insecure)") from None
            except self._transient as exc:
                last = f"{exc.__class__.__name__}"
                continue
            except requests.TooManyRedirects:
                raise RegistryError(f"{what}: {self.ref.registry} redirected more than "
                                    f"{MAX_REDIRECTS} times; refused") from None
            except ValueError as exc:  # oras: "Cannot respond to request for authentication"
                raise RegistryAuthError(f"{what}: {self.ref.registry} wants credentials we do "
                                        f"not have ({exc}); log in (docker config.json) or "
                                        "pass --username/--password-stdin") from None
            if r.status_code in ok:
                return r
            status = r.status_code
            with contextlib.suppress(Exception):
                r.close()
            if status in (401, 403) and self.options.credentials is None:
                raise RegistryAuthError(f"{what}: {self.ref.registry} wants credentials (HTTP "
                                        f"{status}); log in (a docker config.json) or pass "
                                        "--username/--password-stdin")
            if status in (401, 403):
                raise RegistryAuthError(f"{what}: {self.ref.registry} refused access "
                                        f"(HTTP {status}); check the credentials")
            if status == 404:
                raise ArtifactNotFoundError(f"{what}: not found in {self._where()} (HTTP 404)")
            if status in (429,) or status >= 500:
                last = f"HTTP {status}"
                continue
            raise RegistryError(f"{what}: {self.ref.registry} answered HTTP {status}")
        raise RegistryUnavailableError(f"{what}: {self.ref.registry} did not answer after "
                                       f"{self.options.retries + 1} attempts ({last})")

    def _url(self, path: str) -> str:
        return f"{self._scheme}://{path}"

    # -- manifests -------------------------------------------------------------------------
    def get_manifest(self, reference: str) -> tuple[bytes, str, str]:
        """``(bytes, media type, digest)`` of the manifest or index at a tag or digest; a
        digest reference must match the bytes received (ArtifactRejectedError)."""
        what = f"manifest {self._where()}:{reference}"
        r = self._request("GET", self._url(self._container.manifest_url(reference)), what,
                          headers={"Accept": ACCEPT}, stream=True)
        try:
            declared = int(r.headers.get("Content-Length") or 0)
            if declared > MAX_MANIFEST_BYTES:
                raise ArtifactRejectedError(f"{what}: {declared} bytes, more than the "
                                            f"{MAX_MANIFEST_BYTES} a manifest may have")
            data = bytearray()
            with self._reading(r):
                for chunk in r.iter_content(65536):
                    data += chunk
                    if len(data) > MAX_MANIFEST_BYTES:
                        raise ArtifactRejectedError(f"{what}: more than the "
                                                    f"{MAX_MANIFEST_BYTES} bytes a manifest "
                                                    "may have")
            media_type = r.headers.get("Content-Type", "").split(";")[0].strip()
        finally:
            r.close()
        digest = digest_of(bytes(data))
        if reference.startswith("sha256:") and digest != reference:
            raise ArtifactRejectedError(f"{what}: the registry sent content whose digest is "
                                        f"{digest}; refused")
        return bytes(data), media_type, digest

    def put_manifest(self, data: bytes, media_type: str, reference: str) -> str:
        """Push a manifest or index under a tag (or its digest); its digest."""
        self._request("PUT", self._url(self._container.manifest_url(reference)),
                      f"push manifest {self._where()}:{reference}",
                      headers={"Content-Type": media_type}, data=data, ok=(200, 201, 202))
        return digest_of(data)

    # -- blobs -----------------------------------------------------------------------------
    def blob_exists(self, digest: str) -> bool:
        try:
            self._request("HEAD", self._url(self._container.get_blob_url(digest)),
                          f"blob {digest}")
        except ArtifactNotFoundError:
            return False
        return True

    def put_blob_bytes(self, data: bytes, media_type: str) -> None:
        """Push a small blob (configs) unless the registry has it."""
        digest = digest_of(data)
        if self.blob_exists(digest):
            return
        import tempfile

        with tempfile.NamedTemporaryFile() as f:
            f.write(data)
            f.flush()
            self.put_blob(Path(f.name), digest, len(data), media_type)

    def put_blob(self, path: Path, digest: str, size: int, media_type: str,
                 on_progress: Progress | None = None) -> bool:
        """Push a file as a blob (oras' chunked upload, 16 MiB per request) unless the
        registry has it already; True when bytes were sent."""
        if self.blob_exists(digest):
            if on_progress:
                on_progress(size, size)
            return False
        layer = {"mediaType": media_type, "digest": digest, "size": size}
        try:
            r = self._oras.chunked_upload(str(path), self._container, layer,
                                          chunk_size=UPLOAD_CHUNK)
        except ValueError as exc:
            raise RegistryError(f"push {path.name} to {self._where()}: {exc}") from None
        except self._transient as exc:
            raise RegistryUnavailableError(f"push {path.name} to {self._where()}: "
                                           f"{exc.__class__.__name__}; try again") from None
        if r.status_code not in (200, 201, 202):
            raise RegistryError(f"push {path.name} to {self._where()}: the registry answered "
                                f"HTTP {r.status_code}")
        if on_progress:
            on_progress(size, size)
        return True

    def read_blob_head(self, digest: str, limit: int) -> bytes:
        """The first ``limit`` bytes of blob ``digest`` (an HTTP Range request; a registry
        that ignores the range is read only that far). Not digest-checked: callers check
        what they take from it against the manifest's annotations."""
        r = self._request("GET", self._url(self._container.get_blob_url(digest)),
                          f"blob {digest} of {self._where()}", stream=True, ok=(200, 206),
                          headers={"Range": f"bytes=0-{max(0, limit - 1)}"})
        try:
            data = bytearray()
            for chunk in r.iter_content(65536):
                data += chunk
                if len(data) >= limit:
                    break
        finally:
            r.close()
        return bytes(data[:limit])

    def download_blob(self, digest: str, size: int, dest: Path, *, max_bytes: int,
                      on_progress: Progress | None = None) -> int:
        """Write blob ``digest`` (``size`` bytes, at most ``max_bytes``) to ``dest``,
        resuming a cut transfer from what ``dest`` already holds; the sha256 of the whole
        must be ``digest`` (ArtifactRejectedError and ``dest`` removed otherwise). Returns how
        many bytes of an earlier partial ``dest`` were kept (0: downloaded whole)."""
        what = f"blob {digest} of {self._where()}"
        if size > max_bytes:
            raise ArtifactRejectedError(f"{what}: {size} bytes, more than the {max_bytes} "
                                        "this side accepts")
        url = self._url(self._container.get_blob_url(digest))
        hasher = hashlib.sha256()
        have = 0
        with contextlib.suppress(FileNotFoundError), dest.open("rb") as f:
            while block := f.read(CHUNK):
                hasher.update(block)
                have += len(block)
        if have > size:
            dest.unlink()
            hasher, have = hashlib.sha256(), 0
        failures = 0
        resumed_from = have
        check = self.options.guard.check if self.options.guard else lambda: None
        import requests

        while have < size:
            headers = {"Range": f"bytes={have}-"} if have else {}
            try:
                r = self._request("GET", url, what, headers=headers, stream=True,
                                  ok=(200, 206))
            except RegistryUnavailableError:
                if self.options.guard is not None:
                    self.options.guard.check()  # the deadline, not the registry
                raise RegistryUnavailableError(
                    f"{what}: the registry went away after {have} of {size} bytes; try "
                    "again") from None
            try:
                if r.status_code == 200 and have:  # no range support: start again
                    hasher, have = hashlib.sha256(), 0
                    dest.write_bytes(b"")
                with self._reading(r), dest.open("ab") as out:
                    for chunk in r.iter_content(DOWNLOAD_CHUNK):
                        check()
                        if have + len(chunk) > size:
                            raise ArtifactRejectedError(f"{what}: the registry sent more than "
                                                        f"the {size} bytes declared; refused")
                        out.write(chunk)
                        hasher.update(chunk)
                        have += len(chunk)
                        failures = 0
                        if on_progress:
                            on_progress(have, size)
            except (requests.ConnectionError, requests.Timeout,
                    requests.exceptions.ChunkedEncodingError) as exc:
                failures += 1
                if failures > self.options.retries:
                    raise RegistryUnavailableError(
                        f"{what}: the transfer was cut after {have} of {size} bytes "
                        f"({exc.__class__.__name__}) {failures} times; try again") from None
                self._pause(failures)
                continue
            finally:
                r.close()
            if have < size:  # the body ended early without an error
                failures += 1
                if failures > self.options.retries:
                    raise RegistryUnavailableError(f"{what}: the transfer ended after {have} "
                                                   f"of {size} bytes")
                self._pause(failures)
        if "sha256:" + hasher.hexdigest() != digest and resumed_from:
            # the partial file came from elsewhere (another blob, an earlier run): once more
            # from the first byte
            dest.unlink()
            return self.download_blob(digest, size, dest, max_bytes=max_bytes,
                                      on_progress=on_progress)
        if "sha256:" + hasher.hexdigest() != digest:
            with contextlib.suppress(OSError):
                dest.unlink()
            raise ArtifactRejectedError(f"{what}: the bytes received hash to sha256:"
                                        f"{hasher.hexdigest()[:16]}..., not the digest the "
                                        "manifest names; refused (tampered or corrupt)")
        return resumed_from
