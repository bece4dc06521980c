"""mDNS/DNS-SD advertisement of the agent as ``_edge-agent._tcp.local.`` (python-zeroconf).

The SRV record points at the management port; the TXT record carries what the console shows
before connecting: ``id``, ``name``, ``arch``, ``profile``, ``api`` (management API version),
``mgmt`` and ``grpc`` ports, ``fp`` (the SHA-256 fingerprint of the management certificate, so
an operator can compare it before the first contact; ``tls=off`` instead when the agent serves
plaintext), and optionally ``models`` (``name:version`` pairs, truncated to fit).

Wiring (inside the agent's asyncio loop)::

    advertiser = Advertiser(AgentAdvert(id=..., name=..., arch=..., profile=...,
                                        mgmt_port=..., grpc_port=...),
                            interfaces=config.mdns_interfaces)   # None: all interfaces
    await advertiser.start()
    await advertiser.update(models=("resnet:3",))    # when models or profile change
    await advertiser.stop()                          # unregister (goodbye packets) and close
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
import socket
import threading
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

import psutil
from zeroconf import InterfaceChoice, IPVersion, NonUniqueNameException
from zeroconf.asyncio import AsyncServiceInfo, AsyncZeroconf

from edge_agent.config.fields import ipv4_interfaces
from edge_agent.errors import ConfigError

log = logging.getLogger(__name__)

SERVICE_TYPE = "_edge-agent._tcp.local."
MANAGEMENT_API_VERSION = "1"
TXT_KEYS = ("id", "name", "arch", "profile", "api", "mgmt", "grpc", "fp", "tls", "models")
_TXT_VALUE_MAX = 200  # one TXT string is at most 255 bytes including "key="


@dataclass(frozen=True, slots=True)
class AgentAdvert:
    """What the agent advertises about itself."""

    id: str
    name: str
    arch: str
    profile: str
    mgmt_port: int
    grpc_port: int
    api: str = MANAGEMENT_API_VERSION
    models: tuple[str, ...] = ()
    fingerprint: str = ""  # SHA256:... of the management certificate; "": plaintext

    def txt(self) -> dict[str, str]:
        """The TXT record as text key/values."""
        txt = {"id": self.id, "name": self.name, "arch": self.arch, "profile": self.profile,
               "api": self.api, "mgmt": str(self.mgmt_port), "grpc": str(self.grpc_port)}
        if self.fingerprint:
            txt["fp"] = self.fingerprint
        else:
            txt["tls"] = "off"
        if self.models:
            txt["models"] = _fit(",".join(self.models))
        return txt


def _fit(value: str) -> str:
    """Truncate at a comma so the value fits in one TXT string."""
    if len(value.encode()) <= _TXT_VALUE_MAX:
        return value
    cut = value.encode()[:_TXT_VALUE_MAX].decode(errors="ignore")
    return cut[:cut.rfind(",")] + ",..." if "," in cut else cut


def _label(text: str) -> str:
    """A DNS-label-safe form of ``text``."""
    return re.sub(r"[^A-Za-z0-9-]+", "-", text).strip("-")[:40] or "edge-agent"


def advertised_addresses(interfaces: Sequence[str] | None) -> list[str]:
    """IPv4 addresses to advertise: the given interface IPs, or every non-loopback IPv4."""
    if interfaces:
        return list(interfaces)
    found = [a.address for addrs in psutil.net_if_addrs().values() for a in addrs
             if a.family == socket.AF_INET and not a.address.startswith("127.")]
    return found or ["127.0.0.1"]


class Advertiser:
    """Registers the agent's service on start, updates its TXT record, unregisters on stop.

    ``interfaces``: IP addresses of the interfaces to answer on (and to advertise); None means
    all interfaces. Tests pass ``["127.0.0.1"]``.
    """

    def __init__(self, advert: AgentAdvert, *, interfaces: Sequence[str] | None = None) -> None:
        ipv4_interfaces(interfaces or (), "mDNS interface")
        self.advert = advert
        self.interfaces = list(interfaces) if interfaces else None
        self._zc: AsyncZeroconf | None = None
        self._info: AsyncServiceInfo | None = None

    @property
    def service_name(self) -> str:
        """The DNS-SD instance name (unique per agent id)."""
        return f"{_label(self.advert.name)}-{_label(self.advert.id)[:12]}.{SERVICE_TYPE}"

    def _service_info(self) -> AsyncServiceInfo:
        server = f"{_label(self.advert.name)}-{_label(self.advert.id)[:12]}.local."
        return AsyncServiceInfo(
            SERVICE_TYPE, self.service_name, port=self.advert.mgmt_port,
            properties=self.advert.txt(), server=server,
            addresses=[socket.inet_aton(ip) for ip in advertised_addresses(self.interfaces)])

    async def start(self) -> None:
        """Register the service (probing the name first, as mDNS requires)."""
        if self._zc is not None:
            return
        self._zc = AsyncZeroconf(interfaces=self.interfaces or InterfaceChoice.All,
                                 ip_version=IPVersion.V4Only)
        self._info = self._service_info()
        try:
            # The call returns an awaitable that completes once the announcements are sent.
            await (await self._zc.async_register_service(self._info))
        except NonUniqueNameException:
            await self._zc.async_close()
            self._zc = None
            raise ConfigError(
                f"another device already advertises {self.service_name}; give this agent a "
                "unique id or name") from None
        log.info("advertising %s on port %d", self.service_name, self.advert.mgmt_port)

    async def update(self, advert: AgentAdvert | None = None, **changes: Any) -> None:
        """Change what is advertised (a new advert, or fields to replace) and re-announce."""
        new = advert if advert is not None else dataclasses.replace(self.advert, **changes)
        if new.id != self.advert.id or new.name != self.advert.name:
            raise ConfigError("the agent's id and name cannot change while it is advertised; "
                              "stop and start the advertiser")
        self.advert = new
        if self._zc is None:
            return
        self._info = self._service_info()
        await (await self._zc.async_update_service(self._info))

    async def stop(self) -> None:
        """Unregister (sending goodbye packets) and close the zeroconf instance."""
        zc, info = self._zc, self._info
        self._zc = self._info = None
        if zc is None:
            return
        try:
            if info is not None:
                await (await zc.async_unregister_service(info))  # goodbyes sent
        finally:
            await zc.async_close()

    async def __aenter__(self) -> Advertiser:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


class BackgroundAdvertiser:
    """An :class:`Advertiser` driven from synchronous code: its asyncio loop on a daemon
    thread of its own (``edge-mdns``). ``start`` returns False (logged) when the advert cannot
    be registered: the agent serves anyway."""

    def __init__(self, advert: AgentAdvert, *, interfaces: Sequence[str] | None = None) -> None:
        self._advertiser = Advertiser(advert, interfaces=interfaces)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="edge-mdns",
                                        daemon=True)
        self._thread.start()
        self._started = False

    def _run(self, coro: Coroutine[Any, Any, None], timeout: float = 15.0) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def start(self) -> bool:
        """Register the service; False (and the reason logged) when that fails."""
        try:
            self._run(self._advertiser.start())
        except Exception as exc:
            log.warning("mDNS advertisement failed (the agent serves anyway): %s", exc)
            return False
        self._started = True
        return True

    def update(self, advert: AgentAdvert) -> None:
        """Re-announce with ``advert`` (models or profile changed)."""
        if self._started:
            self._run(self._advertiser.update(advert))

    def stop(self) -> None:
        """Withdraw the advert (goodbye packets) and end the loop's thread."""
        if self._started:
            with contextlib.suppress(Exception):
                self._run(self._advertiser.stop())
            self._started = False
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self._loop.close()
