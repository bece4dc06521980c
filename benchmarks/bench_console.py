"""Console figures with 100 agents advertised on loopback: time until all are listed in the
fleet table, and the cost of refreshing that table; and with one real agent: agent view open
-> first plot drawn with the agent's stored history (QueryMetrics).

Run: .venv/bin/python benchmarks/bench_console.py [--agents 100] [--rounds 3]
     .venv/bin/python benchmarks/bench_console.py --agent-view-only [--rounds 5]

The advertisers are lightweight fakes (one AsyncZeroconf on 127.0.0.1 registering N services
with the agent's TXT record; nobody answers management calls, so the console does not poll);
the console is the real app, headless, browsing real mDNS on 127.0.0.1 only. All figures come
from this one run.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from zeroconf import IPVersion
from zeroconf.asyncio import AsyncServiceInfo, AsyncZeroconf

from console.app import EdgeConsoleApp
from console.config import ConsoleSettings
from console.discovery import DiscoveredAgent, DiscoveryEvent
from console.fleet import SORT_COLUMNS, AgentState, ProbeResult
from console.screens.fleet import FleetScreen
from edge_agent.discovery import SERVICE_TYPE, AgentAdvert

LOOPBACK = ["127.0.0.1"]
DEADLINE_S = 120.0
MODELS = SORT_COLUMNS.index("models")


def _info(n: int, run: str) -> AsyncServiceInfo:
    advert = AgentAdvert(id=f"bench-{run}-{n:03d}", name=f"bench-{n:03d}", arch="x86_64",
                         profile="x86_64-cpu-onnxruntime", mgmt_port=40000 + n,
                         grpc_port=41000 + n, models=("mlp:2",))
    name = f"bench-{run}-{n:03d}.{SERVICE_TYPE}"
    return AsyncServiceInfo(SERVICE_TYPE, name, port=advert.mgmt_port, properties=advert.txt(),
                            server=f"bench-{run}-{n:03d}.local.",
                            addresses=[socket.inet_aton("127.0.0.1")])


class FakeFleet:
    """N advertised services from one zeroconf instance on 127.0.0.1."""

    def __init__(self, n: int, run: str) -> None:
        self.infos = [_info(i, run) for i in range(n)]
        self.zc = AsyncZeroconf(ip_version=IPVersion.V4Only, interfaces=LOOPBACK)

    async def register(self) -> None:
        """Probe and announce all N at once (each registration waits for its own probes)."""
        tasks = await asyncio.gather(*(self.zc.async_register_service(i) for i in self.infos))
        await asyncio.gather(*tasks)

    async def close(self) -> None:
        tasks = await asyncio.gather(*(self.zc.async_unregister_service(i)
                                       for i in self.infos))
        await asyncio.gather(*tasks)
        await self.zc.async_close()


def _app() -> EdgeConsoleApp:
    return EdgeConsoleApp(ConsoleSettings(interfaces=tuple(LOOPBACK)), poll=False)


async def _until_listed(app: EdgeConsoleApp, pilot, n: int, run: str) -> float:  # type: ignore[no-untyped-def]
    """Wait until the table shows this run's n agents (loopback mDNS may carry others)."""
    t0 = time.perf_counter()
    prefix = f"bench-{run}-"
    while True:
        screen = app.screen
        if isinstance(screen, FleetScreen) and sum(
                k.startswith(prefix) for k in screen.table._order) >= n:
            return time.perf_counter() - t0
        if time.perf_counter() - t0 > DEADLINE_S:
            raise SystemExit(f"only {len(app.fleet)} of {n} agents listed in {DEADLINE_S}s")
        await pilot.pause(0.01)


async def time_to_list(n: int, run: str, *, already_advertised: bool) -> float:
    """Seconds until n agents are rows of the fleet table: either the console starts while they
    are already advertised (it queries), or they announce while it runs."""
    fleet = FakeFleet(n, run)
    try:
        if already_advertised:
            await fleet.register()
            app = _app()
            t0 = time.perf_counter()
            async with app.run_test(size=(140, 40)) as pilot:
                await _until_listed(app, pilot, n, run)
                return time.perf_counter() - t0
        app = _app()
        async with app.run_test(size=(140, 40)) as pilot:
            await pilot.pause(0.5)  # the browser is up
            t0 = time.perf_counter()
            register = asyncio.create_task(fleet.register())
            await _until_listed(app, pilot, n, run)
            elapsed = time.perf_counter() - t0
            await register
            return elapsed
    finally:
        await fleet.close()


async def browser_alone(n: int, run: str) -> float:
    """Baseline: seconds until a bare AgentBrowser (no UI) has seen n announcing agents."""
    from console.discovery import AgentBrowser

    fleet = FakeFleet(n, run)
    try:
        async with AgentBrowser(interfaces=LOOPBACK) as browser:
            await asyncio.sleep(0.5)
            t0 = time.perf_counter()
            register = asyncio.create_task(fleet.register())
            while sum(a.id.startswith(f"bench-{run}-") for a in browser.agents()) < n:
                if time.perf_counter() - t0 > DEADLINE_S:
                    raise SystemExit(f"the browser saw {len(browser.agents())} of {n}")
                await asyncio.sleep(0.01)
            elapsed = time.perf_counter() - t0
            await register
            return elapsed
    finally:
        await fleet.close()


def _fill(app: EdgeConsoleApp, n: int) -> None:
    now = time.time()
    for i in range(n):
        app.fleet.apply_discovery(DiscoveryEvent("added", DiscoveredAgent(
            id=f"id-{i:03d}", name=f"agent-{i:03d}", host=f"10.0.{i // 250}.{i % 250}",
            port=50051, arch="x86_64", profile="x86_64-cpu-onnxruntime", api="1",
            grpc_port=8001, txt={"models": "mlp:2"}, last_seen=now)))


async def refresh_costs(n: int, reps: int) -> dict[str, float]:
    """Milliseconds per fleet-table refresh with n rows: nothing changed, every row's cells
    changed (probe answers), the order changed (re-sort), and one repaint of the screen."""
    app = EdgeConsoleApp(ConsoleSettings(discovery=False), poll=False)
    out: dict[str, float] = {}
    async with app.run_test(size=(140, 40)) as pilot:
        _fill(app, n)
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, FleetScreen) and len(screen.table._order) == n

        t0 = time.perf_counter()
        for _ in range(reps):
            screen.refresh_fleet()
        out["unchanged"] = (time.perf_counter() - t0) / reps * 1e3

        samples = []
        for r in range(reps):
            for i in range(n):
                app.fleet.apply_probe(f"id-{i:03d}", ProbeResult(
                    AgentState.ONLINE, models=(f"mlp:{r + 3}",)))
            t0 = time.perf_counter()
            screen.refresh_fleet()
            samples.append(time.perf_counter() - t0)
        out["every row changed"] = statistics.median(samples) * 1e3

        samples = []
        for r in range(reps):
            screen.sort_reverse = r % 2 == 0
            t0 = time.perf_counter()
            screen.refresh_fleet()
            samples.append(time.perf_counter() - t0)
        out["re-sorted"] = statistics.median(samples) * 1e3

        samples = []
        last = f"id-{n - 1:03d}"
        for r in range(reps):
            t0 = time.perf_counter()
            for i in range(n):  # 100 probe answers: 100 FleetChanged, collapsed into one
                app.fleet.apply_probe(f"id-{i:03d}", ProbeResult(
                    AgentState.ONLINE, models=(f"mlp:{r + 100}",)))
            while f"mlp:{r + 100}" not in str(screen.table._shown[last][MODELS]):
                await asyncio.sleep(0.0005)
            samples.append(time.perf_counter() - t0)
        out["100 answers -> table"] = statistics.median(samples) * 1e3
    return out


def _stored_traffic(agent: object, seconds: float) -> None:
    """Real KServe v2 requests to mlp for ``seconds``, then wait until the agent's SQLite
    history holds them (what the agent view backfills from)."""
    import numpy as np
    import tritonclient.grpc as triton

    from edge_agent.client.agent_client import AgentClient

    address, token = agent.address, agent.token  # type: ignore[attr-defined]
    with AgentClient(address, token=token) as c:
        client = triton.InferenceServerClient(url=c.info().inference_address)
        x = np.random.default_rng(0).random((2, 64), dtype=np.float32)
        inp = triton.InferInput("input", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            client.infer("mlp", [inp])
        client.close()
        deadline = time.monotonic() + DEADLINE_S
        while not sum(p.requests for p in c.query_metrics("mlp", start=time.time() - 300,
                                                          end=time.time(), step_s=2)):
            if time.monotonic() > deadline:
                raise SystemExit("the agent never stored its metrics")
            time.sleep(0.2)


async def agent_view_open(rounds: int) -> list[float]:
    """Seconds from opening the agent view of a real agent (edge-agent serve, plaintext, with
    stored traffic) until its first model plot is drawn with the stored history."""
    import tempfile

    from console.config import StaticAgent
    from console.screens.agent import AgentScreen
    from console.widgets.metric_plots import TimePlot
    from edge_agent.client.agent_client import AgentClient
    from tests.console_tui.agents import build_test_bundles, start_agent

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        bundles = build_test_bundles(root)
        agent = start_agent(root / "agents", "bench-view", bundles.public_key, mdns=False)
        try:
            with AgentClient(agent.address, token=agent.token) as c:
                assert c.deploy(bundles.mlp[1]).ok
            await asyncio.to_thread(_stored_traffic, agent, 5.0)
            host, port = agent.address.rsplit(":", 1)
            settings = ConsoleSettings(discovery=False, insecure=True,
                                       tokens={agent.address: agent.token},
                                       agents=(StaticAgent(host, int(port), "bench-view"),))
            app = EdgeConsoleApp(settings)
            times = []
            async with app.run_test(size=(160, 45)) as pilot:
                while not app.fleet.agents() or app.fleet.agents()[0].state is not \
                        AgentState.ONLINE:
                    await pilot.pause(0.01)
                key = app.fleet.agents()[0].key
                for _ in range(rounds):
                    t0 = time.perf_counter()
                    screen = AgentScreen(key)
                    await app.push_screen(screen)
                    painted: list[float] = []
                    while not painted:  # a plot with data rendered, its data from history
                        painted = [p.painted_at for p in screen.query(TimePlot)
                                   if p.painted_at is not None
                                   and screen.plot_data.history_loaded]
                        if time.perf_counter() - t0 > DEADLINE_S:
                            raise SystemExit("no plot drawn")
                        await pilot.pause(0.005)
                    times.append(min(painted) - t0)
                    app.pop_screen()
                    await pilot.pause(0.2)
            return times
        finally:
            agent.stop()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--agent-view-only", action="store_true",
                        help="only the agent view figure (one real agent)")
    args = parser.parse_args()
    times = await agent_view_open(max(args.rounds, 3))
    print(f"agent view open -> first plot drawn with history (real agent, {len(times)} opens): "
          f"median {statistics.median(times) * 1e3:.0f} ms (min {min(times) * 1e3:.0f} ms, "
          f"max {max(times) * 1e3:.0f} ms)")
    if args.agent_view_only:
        return
    n = args.agents
    print(f"{n} agents advertised on 127.0.0.1 (mDNS), {args.rounds} rounds")
    medians = {}
    for label, already in (("console started, agents already advertised", True),
                           ("agents announce while the console runs", False),
                           ("baseline: bare AgentBrowser, agents announce", None)):
        times = []
        for r in range(args.rounds):
            run = f"{already}{r}{int(time.time()) % 10000}"
            times.append(await browser_alone(n, run) if already is None else
                         await time_to_list(n, run, already_advertised=already))
        medians[label] = statistics.median(times)
        print(f"  all {n} listed — {label}: median {medians[label]:.2f}s "
              f"(min {min(times):.2f}s, max {max(times):.2f}s)")
    live, bare = medians["agents announce while the console runs"], medians[
        "baseline: bare AgentBrowser, agents announce"]
    print(f"  console / bare browser: {live / bare:.2f}x")
    costs = await refresh_costs(n, args.reps)
    print(f"fleet table refresh with {n} rows (median ms per refresh):")
    for k, v in costs.items():
        print(f"  {k:20s} {v:8.2f} ms")


if __name__ == "__main__":
    asyncio.run(main())
