"""Find edge agents on the LAN: an mDNS browser for ``_edge-agent._tcp.local.``.

Usage (inside an asyncio loop, e.g. a Textual worker)::

    async with AgentBrowser(interfaces=None) as browser:     # None: all interfaces
        async for event in browser.events():
            print(event.kind, event.agent.name, event.agent.host, event.agent.port)

``browser.agents()`` is the current set at any moment. Each zeroconf callback starts a resolve
task; the browser keeps references to those tasks (so they are not garbage-collected mid-flight)
and cancels them on close.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from zeroconf import InterfaceChoice, IPVersion, ServiceStateChange, Zeroconf
from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf

from edge_agent.discovery import SERVICE_TYPE

EventKind = Literal["added", "updated", "removed"]


@dataclass(frozen=True, slots=True)
class DiscoveredAgent:
    """One agent as seen on the network. ``port`` is the management port (the SRV port)."""

    id: str
    name: str
    host: str
    port: int
    arch: str
    profile: str
    api: str
    grpc_port: int | None
    txt: dict[str, str] = field(hash=False)
    addresses: tuple[str, ...] = ()
    service_name: str = ""
    last_seen: float = 0.0
    fingerprint: str = ""  # the management certificate's, as advertised (TXT fp); unverified
    plaintext: bool = False  # advertised tls=off: the agent runs with --insecure


@dataclass(frozen=True, slots=True)
class DiscoveryEvent:
    """An agent appeared, changed its TXT record, or left."""

    kind: EventKind
    agent: DiscoveredAgent


def _decode_txt(props: dict[bytes, bytes | None]) -> dict[str, str]:
    return {k.decode(errors="replace"): (v or b"").decode(errors="replace")
            for k, v in props.items()}


def _agent_from(info: AsyncServiceInfo, name: str) -> DiscoveredAgent | None:
    txt = _decode_txt(info.properties)
    addresses = tuple(info.parsed_addresses(IPVersion.V4Only))
    if not addresses or info.port is None:
        return None
    grpc = txt.get("grpc", "")
    return DiscoveredAgent(
        id=txt.get("id", name), name=txt.get("name", name.removesuffix("." + SERVICE_TYPE)),
        host=addresses[0], port=int(info.port), arch=txt.get("arch", ""),
        profile=txt.get("profile", ""), api=txt.get("api", ""),
        grpc_port=int(grpc) if grpc.isdigit() else None, txt=txt, addresses=addresses,
        service_name=name, last_seen=time.time(), fingerprint=txt.get("fp", ""),
        plaintext=txt.get("tls") == "off")


class AgentBrowser:
    """Browses for agents; reports them as :class:`DiscoveryEvent` s.

    ``interfaces``: IP addresses of the interfaces to listen on, None for all.
    ``on_event``: optional callback run in the loop for each event (besides :meth:`events`).
    """

    def __init__(self, *, interfaces: Sequence[str] | None = None,
                 on_event: Callable[[DiscoveryEvent], None] | None = None,
                 resolve_timeout_ms: int = 3000) -> None:
        self.interfaces = list(interfaces) if interfaces else None
        self.on_event = on_event
        self.resolve_timeout_ms = resolve_timeout_ms
        self._agents: dict[str, DiscoveredAgent] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}  # the pending resolve, per service
        self._queues: list[asyncio.Queue[DiscoveryEvent | None]] = []
        self._zc: AsyncZeroconf | None = None
        self._browser: AsyncServiceBrowser | None = None

    def agents(self) -> list[DiscoveredAgent]:
        """The agents currently seen, by name."""
        return sorted(self._agents.values(), key=lambda a: (a.name, a.id))

    async def start(self) -> None:
        """Start listening."""
        if self._zc is not None:
            return
        self._zc = AsyncZeroconf(interfaces=self.interfaces or InterfaceChoice.All,
                                 ip_version=IPVersion.V4Only)
        self._browser = AsyncServiceBrowser(self._zc.zeroconf, [SERVICE_TYPE],
                                            handlers=[self._on_change])

    async def stop(self) -> None:
        """Stop listening, cancel pending resolves and close zeroconf."""
        browser, zc = self._browser, self._zc
        self._browser = self._zc = None
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        for q in self._queues:
            q.put_nowait(None)  # ends every events() iterator
        if browser is not None:
            await browser.async_cancel()
        if zc is not None:
            await zc.async_close()

    async def __aenter__(self) -> AgentBrowser:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def events(self) -> AsyncIterator[DiscoveryEvent]:
        """Events from now on (agents already known first, as ``added``), until stopped."""
        q: asyncio.Queue[DiscoveryEvent | None] = asyncio.Queue()
        for agent in self.agents():
            q.put_nowait(DiscoveryEvent("added", agent))
        self._queues.append(q)
        try:
            while (event := await q.get()) is not None:
                yield event
        finally:
            self._queues.remove(q)

    # zeroconf calls handlers with keyword arguments, in the loop's thread.
    def _on_change(self, zeroconf: Zeroconf, service_type: str, name: str,
                   state_change: ServiceStateChange) -> None:
        pending = self._tasks.pop(name, None)
        if pending is not None:
            pending.cancel()  # a newer change supersedes it
        if state_change is ServiceStateChange.Removed:
            gone = self._agents.pop(name, None)
            if gone is not None:
                self._emit(DiscoveryEvent("removed", gone))
            return
        task = asyncio.get_running_loop().create_task(self._resolve(zeroconf, service_type, name))
        self._tasks[name] = task

        def forget(done: asyncio.Task[None]) -> None:
            if self._tasks.get(name) is done:
                del self._tasks[name]

        task.add_done_callback(forget)

    async def _resolve(self, zeroconf: Zeroconf, service_type: str, name: str) -> None:
        info = AsyncServiceInfo(service_type, name)
        if not await info.async_request(zeroconf, self.resolve_timeout_ms):
            return
        agent = _agent_from(info, name)
        if agent is None:
            return
        before = self._agents.get(name)
        self._agents[name] = agent
        if before is None:
            self._emit(DiscoveryEvent("added", agent))
        elif (before.txt, before.addresses, before.port) != (agent.txt, agent.addresses,
                                                              agent.port):
            self._emit(DiscoveryEvent("updated", agent))

    def _emit(self, event: DiscoveryEvent) -> None:
        for q in self._queues:
            q.put_nowait(event)
        if self.on_event is not None:
            self.on_event(event)
