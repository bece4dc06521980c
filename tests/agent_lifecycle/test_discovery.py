"""mDNS advertisement and browsing with real zeroconf, bound to 127.0.0.1 only."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest

from console.discovery import AgentBrowser, DiscoveredAgent, DiscoveryEvent
from edge_agent.discovery import SERVICE_TYPE, Advertiser, AgentAdvert
from edge_agent.errors import ConfigError
from tests.support.eventually import eventually_async

LOOPBACK = ["127.0.0.1"]
DEADLINE_S = 20


def _advert(n: int, **kw: object) -> AgentAdvert:
    base = dict(id=f"test-{n}-{uuid.uuid4().hex[:12]}", name=f"bench-{n}", arch="x86_64",
                profile="x86_64-cpu-onnxruntime", mgmt_port=50_000 + n, grpc_port=51_000 + n)
    base.update(kw)
    return AgentAdvert(**base)  # type: ignore[arg-type]


async def _next(events: AsyncIterator[DiscoveryEvent], kind: str,
                agent_id: str) -> DiscoveryEvent:
    async def wait() -> DiscoveryEvent:
        async for event in events:
            if event.kind == kind and event.agent.id == agent_id:
                return event
        raise AssertionError("the browser stopped")

    return await asyncio.wait_for(wait(), DEADLINE_S)


async def test_advertise_update_and_vanish() -> None:
    advert = _advert(1)
    async with AgentBrowser(interfaces=LOOPBACK) as browser:
        events = browser.events()
        advertiser = Advertiser(advert, interfaces=LOOPBACK)
        await advertiser.start()
        try:
            added = (await _next(events, "added", advert.id)).agent
            assert (added.name, added.host, added.port) == ("bench-1", "127.0.0.1", 50_001)
            assert (added.arch, added.profile, added.api, added.grpc_port) == (
                "x86_64", "x86_64-cpu-onnxruntime", "1", 51_001)
            assert added.txt["mgmt"] == "50001"
            assert added.service_name == advertiser.service_name
            assert added.service_name.endswith(SERVICE_TYPE)

            await advertiser.update(profile="x86_64-cpu-openvino", models=("resnet:3", "bert:1"))
            updated = (await _next(events, "updated", advert.id)).agent
            assert updated.profile == "x86_64-cpu-openvino"
            assert updated.txt["models"] == "resnet:3,bert:1"
            assert [a.profile for a in _own(browser, advert.id)] == ["x86_64-cpu-openvino"]
        finally:
            await advertiser.stop()
        removed = (await _next(events, "removed", advert.id)).agent
        assert removed.id == advert.id
        assert _own(browser, advert.id) == []


async def test_two_advertisers_at_once() -> None:
    a, b = _advert(2), _advert(3, arch="aarch64", profile="arm64-cpu-onnxruntime")
    seen: list[DiscoveryEvent] = []
    async with AgentBrowser(interfaces=LOOPBACK, on_event=seen.append) as browser:
        async with Advertiser(a, interfaces=LOOPBACK), Advertiser(b, interfaces=LOOPBACK):
            # the two adverts may be seen in either order
            await eventually_async(lambda: len(_own(browser, a.id, b.id)) == 2,
                                   timeout=DEADLINE_S, message="both adverts never seen")
            found = {x.id: x for x in _own(browser, a.id, b.id)}
            assert found[a.id].port != found[b.id].port
            assert (found[a.id].arch, found[b.id].arch) == ("x86_64", "aarch64")
            assert {x.id for x in _own(browser, a.id, b.id)} == {a.id, b.id}
        await eventually_async(lambda: not _own(browser, a.id, b.id), timeout=DEADLINE_S,
                               message="the adverts were never withdrawn")
    assert {e.agent.id for e in seen if e.kind == "removed"} == {a.id, b.id}


def _own(browser: AgentBrowser, *ids: str) -> list[DiscoveredAgent]:
    """The agents this test advertised (other processes may advertise on loopback too)."""
    return [a for a in browser.agents() if a.id in ids]


async def test_events_iterator_ends_when_the_browser_stops() -> None:
    browser = AgentBrowser(interfaces=LOOPBACK)
    await browser.start()
    collected: list[DiscoveryEvent] = []

    async def drain() -> None:
        async for e in browser.events():
            collected.append(e)

    task = asyncio.create_task(drain())
    await asyncio.sleep(0)
    await browser.stop()
    await asyncio.wait_for(task, DEADLINE_S)
    assert all(isinstance(e, DiscoveryEvent) for e in collected)


def test_bad_interface_and_identity_change_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="IPv4"):
        Advertiser(_advert(4), interfaces=["eth0"])
    adv = Advertiser(_advert(5), interfaces=LOOPBACK)
    with pytest.raises(ConfigError, match="cannot change"):
        asyncio.run(adv.update(name="other"))


def test_long_model_lists_are_truncated_to_fit_a_txt_string() -> None:
    models = tuple(f"model-number-{i}:{i}" for i in range(40))
    txt = _advert(6, models=models).txt()
    assert len(txt["models"].encode()) <= 255 - len("models=")
    assert txt["models"].endswith(",...") and txt["models"].startswith("model-number-0:0,")
