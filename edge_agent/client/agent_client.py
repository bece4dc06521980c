"""The Python client of the management API (what edge-console uses).

Usage::

    tls = PinnedTls(fingerprint)           # from `edge-agent token` (or a known_agents file)
    with AgentClient("192.168.1.20:50051", token=token, tls=tls) as agent:
        print(agent.info().profile)
        result = agent.deploy(Path("mlp-2-x86_64-cpu-openvino.edgepkg"),
                              on_step=lambda s: print(s.step, s.message))
        if not result.ok:
            print(result.message)
        agent.rollback("mlp")

Every method raises :class:`ManagementError` (a subclass per cause) with one line a user can act
on; it never returns protobuf messages.

Transport: ``tls=PinnedTls(...)`` (the agent's self-signed certificate, checked against a pinned
SHA-256 fingerprint), ``tls=ClientTls(...)`` (a CA, optionally a client certificate: mTLS), or
``tls=None``: plaintext, only for an agent started with ``--insecure``. A client and an agent
that disagree about TLS get a message that says which side to change.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from edge_agent.client import convert
from edge_agent.client.types import (
    AgentInfo,
    DeployCheck,
    DeploymentInfo,
    DeployResult,
    DoctorReport,
    LogLine,
    MetricPoint,
    MetricsSample,
    SettingInfo,
    StepInfo,
    SystemPoint,
    TuningInfo,
    VersionInfo,
)
from edge_agent.errors import AgentError, ErrorCode
from edge_agent.management.auth import bearer
from edge_agent.management.generated import management_pb2 as pb
from edge_agent.management.generated import management_pb2_grpc as pb_grpc
from edge_agent.management.tls import SERVER_NAME, fingerprint, normalize_fingerprint
from edge_agent.management.wire import CALLER_METADATA, REFUSED

CHUNK_BYTES = 1 << 20
_CODES = {c.name: c for c in ErrorCode}


class ManagementError(AgentError):
    """A management call failed; ``status`` is the gRPC status name."""

    def __init__(self, message: str, status: str = "UNKNOWN") -> None:
        super().__init__(message)
        self.status = status
        self.code = _CODES.get(status, ErrorCode.INTERNAL)


class AuthenticationError(ManagementError):
    """The agent refused the token (or the client certificate)."""


class ManagementUnreachableError(ManagementError):
    """No agent answered at the address (down, wrong port, firewall, TLS mismatch)."""


class TransportMismatchError(ManagementUnreachableError):
    """One side speaks TLS and the other plaintext (``--insecure`` on one side only)."""


class CertificateChangedError(ManagementError):
    """The agent presented a certificate other than the pinned one."""

    def __init__(self, message: str, *, pinned: str, presented: str) -> None:
        super().__init__(message, "UNAVAILABLE")
        self.pinned, self.presented = pinned, presented


class InferencePortError(ManagementError):
    """The address is an agent's inference port (KServe v2), not its management API."""


@dataclass(frozen=True)
class ClientTls:
    """TLS for the management channel: the agent's CA, and a client cert/key for mTLS."""

    ca: Path
    cert: Path | None = None
    key: Path | None = None
    server_name: str | None = None  # override when the certificate names another host

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca.read_bytes(),
            private_key=self.key.read_bytes() if self.key else None,
            certificate_chain=self.cert.read_bytes() if self.cert else None)


@dataclass(frozen=True)
class PinnedTls:
    """TLS to an agent's self-signed certificate, trusted because its SHA-256 fingerprint is
    ``fingerprint`` (``SHA256:AB:CD:...``); ``cert``/``key``: a client certificate (mTLS)."""

    fingerprint: str
    cert: Path | None = None
    key: Path | None = None


def _host_port(target: str) -> tuple[str, int]:
    host, _, port = target.rpartition(":")
    return host.strip("[]"), int(port)


def fetch_certificate(target: str, *, timeout_s: float = 10.0, cert: Path | None = None,
                      key: Path | None = None) -> str:
    """The PEM certificate the agent at ``target`` presents (not verified: compare its
    :func:`~edge_agent.management.tls.fingerprint` with a pin before trusting it).

    Raises ManagementUnreachableError (nothing answers) or TransportMismatchError (it answers in
    plaintext: an agent started with ``--insecure``).
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    if cert is not None and key is not None:
        context.load_cert_chain(cert, key)
    try:
        host, port = _host_port(target)
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            try:
                with context.wrap_socket(sock, server_hostname=SERVER_NAME) as tls:
                    der = tls.getpeercert(binary_form=True)
            except (ssl.SSLError, ConnectionResetError, EOFError) as exc:
                reason = getattr(exc, "reason", None) or str(exc)
                refused = refusal(target)
                if refused is not None:
                    raise refused from None
                port_error = _inference_port(target, min(timeout_s, 5.0))
                if port_error is not None:
                    raise port_error from None
                raise TransportMismatchError(
                    f"agent {target} does not answer TLS ({reason}): it serves plaintext "
                    "(started with --insecure?); use --insecure on the console too, or "
                    "restart the agent without --insecure", "UNAVAILABLE") from None
    except TimeoutError:
        raise ManagementUnreachableError(f"cannot reach an agent at {target}: no answer within "
                                    f"{timeout_s:g} s", "UNAVAILABLE") from None
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ManagementUnreachableError(f"cannot reach an agent at {target}: {why}",
                                    "UNAVAILABLE") from None
    if not der:
        raise ManagementUnreachableError(f"agent {target} presented no certificate", "UNAVAILABLE")
    return ssl.DER_cert_to_PEM_cert(der)


def _first_bytes(target: str, send: bytes, end: bytes, limit: int,
                 timeout_s: float) -> bytes | None:
    """What ``target`` answers to ``send`` on a new connection, up to ``end`` or ``limit``
    bytes (or until it closes); None when it cannot be reached."""
    try:
        host, port = _host_port(target)
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            if send:
                sock.sendall(send)
            head = b""
            while end not in head and len(head) < limit:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                head += chunk
    except (OSError, ValueError):
        return None
    return head


def refusal(target: str, *, timeout_s: float = 1.0) -> ManagementUnreachableError | None:
    """The error to raise when the agent at ``target`` refuses connections from this address
    (too many of them, or too many not yet authenticated: it says so in one line on connect);
    None when it does not."""
    line = _first_bytes(target, b"", b"\n", 1024, timeout_s)
    if line is None or not line.startswith(REFUSED):
        return None
    why = line.split(b"\n", 1)[0].decode(errors="replace")
    return ManagementUnreachableError(
        f"agent {target} is reachable but {why} (other clients from this address hold its "
        "connections; --insecure and TLS settings are not the cause)", "UNAVAILABLE")


def answers_kserve(target: str, *, timeout_s: float = 5.0) -> bool:
    """Whether ``target`` answers KServe v2 ServerMetadata in plaintext (an inference port)."""
    with grpc.insecure_channel(target) as channel:
        metadata = channel.unary_unary(
            "/inference.GRPCInferenceService/ServerMetadata",
            request_serializer=lambda _: b"", response_deserializer=lambda raw: raw)
        try:
            metadata(None, timeout=timeout_s)
        except grpc.RpcError:
            return False
    return True


def answers_http1(target: str, *, timeout_s: float = 5.0) -> str | None:
    """The ``Server`` header ("" when none) of an HTTP/1.1 server answering at ``target`` in
    plaintext (the agent's KServe REST port, ``serve --http``); None when none answers."""
    head = _first_bytes(target, f"GET /v2/health/live HTTP/1.1\r\nHost: {target}\r\n"
                        "Connection: close\r\n\r\n".encode("latin-1"), b"\r\n\r\n", 8192,
                        timeout_s)
    if head is None or not head.startswith(b"HTTP/1."):
        return None
    for line in head.split(b"\r\n\r\n")[0].split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == b"server":
            return value.strip().decode("latin-1")
    return ""


def inference_port_message(target: str, *, http_server: str | None = None) -> str:
    """What to say when the management client was pointed at an inference port: the gRPC
    one, or (``http_server``: its Server header) an HTTP/1.1 one."""
    if http_server is None:
        what = "an agent's inference port (KServe v2)"
    elif http_server.startswith("edge-agent"):
        what = "the agent's HTTP (KServe REST) port (`edge-agent serve --http`)"
    else:
        what = f"an HTTP/1.1 server ({http_server or 'no Server header'})"
    return (f"{target} is {what}, not its management API (--insecure would not help: it only "
            "turns TLS off); the management port is the one given to `edge-agent serve "
            "--management` (50051 in the README's example; the agent's ready line says "
            "'management on HOST:PORT'): `edge-console agents` lists each agent's management "
            "address")


def _inference_port(target: str, timeout_s: float) -> InferencePortError | None:
    """The error naming ``target`` as an inference port (HTTP/1.1 or KServe v2 gRPC), or
    None when it is neither."""
    server = answers_http1(target, timeout_s=timeout_s)
    if server is not None:
        return InferencePortError(inference_port_message(target, http_server=server),
                                  "UNIMPLEMENTED")
    if answers_kserve(target, timeout_s=timeout_s):
        return InferencePortError(inference_port_message(target), "UNIMPLEMENTED")
    return None


def changed_message(target: str, pinned: str, presented: str) -> str:
    """What to say when ``target`` presents another certificate than the pinned one."""
    return (f"the certificate of agent {target} has CHANGED since it was pinned: pinned "
            f"{pinned}, presented {presented}. Someone may be impersonating the agent, or its "
            "state directory (tls/) was recreated. Check on the device with `edge-agent token "
            "--state-dir DIR`; only if it shows the new fingerprint, remove the old pin")


def default_caller() -> str:
    """``user@host (edge-console VERSION)``: how this client names itself to an agent."""
    import getpass

    from edge_agent import __version__

    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        user = "uid-" + str(os.getuid())
    return f"{user}@{socket.gethostname()} (edge-console {__version__})"


class AgentClient:
    """A connection to one agent's management API. Thread-safe; close it (or use ``with``)."""

    def __init__(self, target: str, *, token: str | None = None,
                 tls: ClientTls | PinnedTls | None = None,
                 timeout_s: float = 30.0, deploy_timeout_s: float = 600.0,
                 caller: str | None = None) -> None:
        """``caller`` describes this client in the agent's log with each change it asks for
        (default ``user@host (edge-console VERSION)``)."""
        self.target = target
        self.timeout_s = timeout_s
        self.deploy_timeout_s = deploy_timeout_s
        self.tls = tls
        self._metadata: tuple[tuple[str, str], ...] = (
            *(bearer(token) if token else ()), (CALLER_METADATA, caller or default_caller()))
        options: list[tuple[str, Any]] = [("grpc.max_send_message_length", 8 << 20),
                   ("grpc.max_receive_message_length", 8 << 20)]
        if isinstance(tls, PinnedTls):
            pinned = normalize_fingerprint(tls.fingerprint)
            pem = fetch_certificate(target, timeout_s=min(timeout_s, 10.0), cert=tls.cert,
                                    key=tls.key)
            if fingerprint(pem) != pinned:
                raise CertificateChangedError(changed_message(target, pinned, fingerprint(pem)),
                                              pinned=pinned, presented=fingerprint(pem))
            options.append(("grpc.ssl_target_name_override", SERVER_NAME))
            creds = grpc.ssl_channel_credentials(
                root_certificates=pem.encode(),
                private_key=tls.key.read_bytes() if tls.key else None,
                certificate_chain=tls.cert.read_bytes() if tls.cert else None)
            self._channel = grpc.secure_channel(target, creds, options=options)
        elif tls is not None:
            if tls.server_name:
                options.append(("grpc.ssl_target_name_override", tls.server_name))
            self._channel = grpc.secure_channel(target, tls.credentials(), options=options)
        else:
            self._channel = grpc.insecure_channel(target, options=options)
        self._stub = pb_grpc.AgentManagementStub(self._channel)

    def close(self) -> None:
        """Close the channel."""
        self._channel.close()

    def __enter__(self) -> AgentClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- calls ---------------------------------------------------------------------------------
    def _call(self, method: Callable[..., Any], request: Any, what: str) -> Any:
        try:
            return method(request, metadata=self._metadata, timeout=self.timeout_s)
        except grpc.RpcError as exc:
            raise self._error(exc, what) from None

    def _error(self, exc: grpc.RpcError, what: str) -> ManagementError:
        code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
        details = (exc.details() if hasattr(exc, "details") else "") or str(code)
        name = code.name if code is not None else "UNKNOWN"
        if code is grpc.StatusCode.UNAVAILABLE:
            mismatch = self._transport_mismatch(details)
            if mismatch is not None:
                return mismatch
        if code is grpc.StatusCode.UNAUTHENTICATED:
            return AuthenticationError(f"agent {self.target} refused {what}: {details}", name)
        if code is grpc.StatusCode.UNAVAILABLE and ("connect" in details.lower()
                                                   or "dns" in details.lower()
                                                   or "handshake" in details.lower()):
            return ManagementUnreachableError(f"cannot reach an agent at {self.target}: {details}",
                                         name)
        if code is grpc.StatusCode.DEADLINE_EXCEEDED:
            return ManagementUnreachableError(f"agent {self.target} did not answer {what} in time",
                                         name)
        if code is grpc.StatusCode.UNIMPLEMENTED and self._is_inference_port():
            return InferencePortError(inference_port_message(self.target), name)
        return ManagementError(f"agent {self.target}: {what} failed: {details}", name)

    def _transport_mismatch(self, details: str) -> ManagementError | None:
        """Why a call could not connect when TLS is the reason, or the agent refused the
        connection (asks the agent again)."""
        low = details.lower()
        if any(w in low for w in ("socket closed", "wrong_version_number", "handshake",
                                  "connection reset", "eof")):
            refused = refusal(self.target)
            if refused is not None:
                return refused
        if self.tls is None and "socket closed" in low:
            try:
                pem = fetch_certificate(self.target, timeout_s=min(self.timeout_s, 5.0))
            except ManagementError:
                return None
            return TransportMismatchError(
                f"agent {self.target} requires TLS (certificate {fingerprint(pem)}) and this "
                "client connected in plaintext: drop --insecure (the console then pins the "
                "agent's certificate)", "UNAVAILABLE")
        if self.tls is None and "http1.x server" in low:  # plaintext gRPC met HTTP/1.1
            return _inference_port(self.target, min(self.timeout_s, 5.0))
        if self.tls is not None and "wrong_version_number" in low:
            port_error = _inference_port(self.target, min(self.timeout_s, 5.0))
            if port_error is not None:
                return port_error
            return TransportMismatchError(
                f"agent {self.target} serves plaintext (started with --insecure?) and this "
                "client requires TLS: use --insecure on the console too, or restart the agent "
                "without --insecure", "UNAVAILABLE")
        if isinstance(self.tls, PinnedTls) and "certificate_verify_failed" in low:
            pinned = normalize_fingerprint(self.tls.fingerprint)
            try:
                presented = fingerprint(fetch_certificate(self.target, timeout_s=5.0,
                                                          cert=self.tls.cert,
                                                          key=self.tls.key))
            except ManagementError as exc:
                return exc
            if presented != pinned:
                return CertificateChangedError(changed_message(self.target, pinned, presented),
                                               pinned=pinned, presented=presented)
            return ManagementUnreachableError(
                f"agent {self.target} presents the pinned certificate, but it cannot be its own "
                f"trust anchor (signed by a CA, or not naming '{SERVER_NAME}'): an agent with "
                "its own tls_cert needs that CA in the console config ([tls] ca or tls_ca)",
                "UNAVAILABLE")
        return None

    def _is_inference_port(self) -> bool:
        """Whether the target answers KServe v2 ServerMetadata (the agent's inference port)."""
        metadata = self._channel.unary_unary(
            "/inference.GRPCInferenceService/ServerMetadata",
            request_serializer=lambda _: b"", response_deserializer=lambda raw: raw)
        try:
            metadata(None, timeout=min(self.timeout_s, 5.0))
        except grpc.RpcError:
            return False
        return True

    def _speaks_management(self) -> bool:
        """Whether the target serves this management API at all (GetInfo answers)."""
        try:
            self.info()
        except ManagementError:
            return False
        return True

    def info(self) -> AgentInfo:
        """Who the agent is: id, name, host, arch, profile, runtimes, version, uptime."""
        return convert.agent_info(self._call(self._stub.GetInfo, pb.GetInfoRequest(), "GetInfo"))

    def models(self, model: str | None = None) -> list[VersionInfo]:
        """Every model version on the agent's disk."""
        reply = self._call(self._stub.ListModels, pb.ListModelsRequest(model=model or ""),
                           "ListModels")
        return [convert.version_info(v) for v in reply.versions]

    def deployments(self, model: str | None = None, limit: int = 50) -> list[DeploymentInfo]:
        """Deployment history, newest first."""
        reply = self._call(self._stub.ListDeployments,
                           pb.ListDeploymentsRequest(model=model or "", limit=limit),
                           "ListDeployments")
        return [convert.deployment_info(d) for d in reply.deployments]

    def deploy(self, bundle: Path, *, force: bool = False,
               on_progress: Callable[[int, int], None] | None = None,
               on_step: Callable[[StepInfo], None] | None = None) -> DeployResult:
        """Upload ``bundle`` and deploy it; ``on_progress(received, total)`` and
        ``on_step(step)`` report as the agent goes. The result says how far it got."""
        bundle = Path(bundle)
        try:
            size = bundle.stat().st_size
        except OSError as exc:
            raise ManagementError(f"cannot read the bundle {bundle}: {exc.strerror}",
                                  "INVALID_ARGUMENT") from None

        def requests() -> Iterator[pb.DeployRequest]:
            yield pb.DeployRequest(header=pb.DeployHeader(filename=bundle.name,
                                                          size_bytes=size, force=force))
            with open(bundle, "rb") as f:
                while chunk := f.read(CHUNK_BYTES):
                    yield pb.DeployRequest(chunk=chunk)

        try:
            result = _follow(self._stub.Deploy(requests(), metadata=self._metadata,
                                               timeout=self.deploy_timeout_s),
                             on_progress, on_step)
        except grpc.RpcError as exc:
            raise self._error(exc, f"deploying {bundle.name}") from None
        if result is None:
            raise ManagementError(f"agent {self.target} ended the deploy of {bundle.name} "
                                  "without a result", "INTERNAL")
        return result

    def deploy_reference(self, reference: str, *, force: bool = False,
                         on_progress: Callable[[int, int], None] | None = None,
                         on_step: Callable[[StepInfo], None] | None = None) -> DeployResult:
        """Have the agent pull ``reference`` (``oci://...@sha256:...``) from its registry and
        deploy it; ``on_progress(pulled, total)`` and ``on_step`` as in :meth:`deploy`."""
        request = pb.DeployReferenceRequest(reference=reference, force=force)
        try:
            result = _follow(self._stub.DeployReference(request, metadata=self._metadata,
                                                        timeout=self.deploy_timeout_s),
                             on_progress, on_step)
        except grpc.RpcError as exc:
            if exc.code() is grpc.StatusCode.UNIMPLEMENTED and self._speaks_management():
                raise ManagementError(f"agent {self.target} predates deploy by reference; "
                                      "upgrade it or deploy the bundle file",
                                      "UNIMPLEMENTED") from None
            details = exc.details() if hasattr(exc, "details") else ""
            if details and details.startswith("registry: "):  # the registry, not the agent
                raise ManagementError(f"agent {self.target}: {details}",
                                      exc.code().name) from None
            raise self._error(exc, f"deploying {reference}") from None
        if result is None:
            raise ManagementError(f"agent {self.target} ended the deploy of {reference} "
                                  "without a result", "INTERNAL")
        return result

    def check_deploy(self, bundle: Path, *, force: bool = False) -> DeployCheck | None:
        """Ask the agent whether it would deploy ``bundle`` (its manifest, signature and size
        are sent, not the bundle); None from an agent that predates CheckDeploy."""
        from packager.bundle.errors import PackagerError
        from packager.bundle.reader import open_bundle

        bundle = Path(bundle)
        try:
            with open_bundle(bundle) as reader:
                manifest, signature = reader.manifest_bytes, reader.signature
            size = bundle.stat().st_size
        except (PackagerError, OSError) as exc:
            raise ManagementError(str(exc), "INVALID_ARGUMENT") from None
        return self.check_deploy_manifest(manifest, signature, size, bundle.name, force=force)

    def check_deploy_manifest(self, manifest: bytes, signature: bytes | None, size: int,
                              filename: str, *, force: bool = False) -> DeployCheck | None:
        """:meth:`check_deploy` from a bundle's manifest and signature bytes and its size
        (e.g. read from a registry); None from an agent that predates CheckDeploy."""
        request = pb.CheckDeployRequest(manifest=manifest, size_bytes=size, force=force,
                                        filename=filename)
        if signature is not None:
            request.signature = signature
        try:
            reply = self._stub.CheckDeploy(request, metadata=self._metadata,
                                           timeout=self.timeout_s)
        except grpc.RpcError as exc:
            if exc.code() is grpc.StatusCode.UNIMPLEMENTED and self._speaks_management():
                return None
            raise self._error(exc, f"checking {filename}") from None
        return DeployCheck(ok=reply.ok, message=reply.message, refusal=reply.refusal,
                           model=reply.model, version=reply.version, backend=reply.backend,
                           key_id=reply.key_id)

    def activate(self, model: str, version: int, *, force: bool = False) -> DeployResult:
        """Make ``version`` active (force: reload the active version from disk)."""
        reply = self._call_long(self._stub.Activate,
                                pb.ActivateRequest(model=model, version=version, force=force),
                                f"activating {model} version {version}")
        return convert.deploy_result(reply)

    def rollback(self, model: str, to_version: int | None = None) -> DeployResult:
        """Switch ``model`` back to the previous version (or ``to_version``)."""
        reply = self._call_long(self._stub.Rollback,
                                pb.RollbackRequest(model=model, to_version=to_version or 0),
                                f"rolling back {model}")
        return convert.deploy_result(reply)

    def remove(self, model: str, version: int) -> DeployResult:
        """Delete a version that is not active."""
        reply = self._call(self._stub.RemoveVersion,
                           pb.RemoveVersionRequest(model=model, version=version),
                           f"removing {model} version {version}")
        return convert.deploy_result(reply)

    def model_settings(self, model: str) -> list[SettingInfo]:
        """Every setting of ``model`` with its effective value and source."""
        reply = self._call(self._stub.GetModelSettings,
                           pb.GetModelSettingsRequest(model=model), f"reading {model}'s settings")
        return [SettingInfo(s.key, s.value, s.source) for s in reply.settings]

    def set_model_settings(self, model: str, values: Mapping[str, str] | None = None,
                           unset: Sequence[str] = (), *, replace: bool = False,
                           revert: bool = False) -> DeployResult:
        """Change ``model``'s live settings (values: key -> TOML literal) through a hot swap;
        ``revert`` goes back to the settings before the last settings change."""
        reply = self._call_long(self._stub.SetModelSettings, pb.SetModelSettingsRequest(
            model=model, set=dict(values or {}), unset=list(unset), replace=replace,
            revert=revert), f"changing {model}'s settings")
        return convert.deploy_result(reply)

    def record_tuning(self, model: str, summary: str, data: Mapping[str, Any]) -> int:
        """Store a tuning run in the agent's database; returns its id."""
        reply = self._call(self._stub.RecordTuning, pb.TuningResult(
            model=model, summary=summary, data_json=json.dumps(data)), "recording a tuning run")
        return int(reply.id)

    def tuning(self, model: str | None = None, *, latest_only: bool = False,
               limit: int = 50) -> list[TuningInfo]:
        """Stored tuning runs, newest first (latest_only: the last one per model)."""
        reply = self._call(self._stub.ListTuning, pb.ListTuningRequest(
            model=model or "", latest_only=latest_only, limit=limit), "listing tuning runs")
        return [TuningInfo(r.id, r.model, r.at, r.summary, json.loads(r.data_json or "{}"))
                for r in reply.results]

    def _call_long(self, method: Callable[..., Any], request: Any, what: str) -> Any:
        try:
            return method(request, metadata=self._metadata, timeout=self.deploy_timeout_s)
        except grpc.RpcError as exc:
            raise self._error(exc, what) from None

    def query_metrics(self, model: str, *, start: float = 0.0, end: float = 0.0,
                      step_s: int = 60, per_version: bool = False) -> list[MetricPoint]:
        """Stored metrics of ``model`` (start/end 0: the last hour up to now)."""
        reply = self._call(self._stub.QueryMetrics,
                           pb.QueryMetricsRequest(model=model, start=start, end=end,
                                                  step_s=step_s, per_version=per_version),
                           "QueryMetrics")
        return [convert.metric_point(p) for p in reply.points]

    def query_system(self, *, start: float = 0.0, end: float = 0.0,
                     step_s: int = 60) -> list[SystemPoint]:
        """Stored device samples (start/end 0: the last hour up to now)."""
        reply = self._call(self._stub.QuerySystemMetrics,
                           pb.QuerySystemMetricsRequest(start=start, end=end, step_s=step_s),
                           "QuerySystemMetrics")
        return [convert.system_point(p) for p in reply.points]

    def doctor(self) -> DoctorReport:
        """The agent's device checks (``edge-agent doctor`` run on the device)."""
        reply = self._call_long(self._stub.GetDoctor, pb.GetDoctorRequest(), "GetDoctor")
        return convert.doctor_report(reply)

    def logs(self, *, tail: int = 200, min_level: str = "",
             follow: bool = False) -> Iterator[LogLine]:
        """The agent's recent log lines, then (``follow``) new ones until closed."""
        call = self._stub.StreamLogs(pb.StreamLogsRequest(tail=tail, min_level=min_level,
                                                          follow=follow),
                                     metadata=self._metadata,
                                     timeout=None if follow else self.timeout_s)
        try:
            for line in call:
                yield convert.log_line(line)
        except grpc.RpcError as exc:
            if exc.code() is not grpc.StatusCode.CANCELLED:
                raise self._error(exc, "StreamLogs") from None
        finally:
            call.cancel()

    def watch_metrics(self, model: str | None = None) -> Iterator[MetricsSample]:
        """Live samples, one a second, until the iterator is closed (``.close()``)."""
        call = self._stub.WatchMetrics(pb.WatchMetricsRequest(model=model or ""),
                                       metadata=self._metadata)
        try:
            for sample in call:
                yield convert.metrics_sample(sample)
        except grpc.RpcError as exc:
            if exc.code() is not grpc.StatusCode.CANCELLED:
                raise self._error(exc, "WatchMetrics") from None
        finally:
            call.cancel()


def _follow(events: Iterator[pb.DeployEvent], on_progress: Callable[[int, int], None] | None,
            on_step: Callable[[StepInfo], None] | None) -> DeployResult | None:
    """Read a Deploy or DeployReference stream: progress and steps to the callbacks; the
    result (None when the stream ended without one)."""
    result = None
    for event in events:
        kind = event.WhichOneof("event")
        if kind == "progress" and on_progress is not None:
            on_progress(event.progress.received_bytes, event.progress.total_bytes)
        elif kind == "step" and on_step is not None:
            on_step(convert.step_info(event.step))
        elif kind == "result":
            result = convert.deploy_result(event.result)
    return result
