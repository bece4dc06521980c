"""A fleet through a real Mosquitto on this machine (issue 30, docs/fleet.md): three real
agents and a simulator of N agents speaking the same protocol (a few processes, one MQTT
client per simulated agent), measured:

1. the console's fleet view complete for every agent: ``edge-console fleet agents --json``,
   and the TUI (``edge-console ui --broker``, headless) until its broker panel counts them;
2. a four-wave rollout (``1,5%,25%,100%``, ``--soak``) to every agent;
3. the same with a share of the simulated agents failing the deploy (``--fail-rate``): where
   it halts and how many changed agents report the previous state again;
4. steady state: broker messages per agent per minute and bytes per agent per day (every
   message under ``edge/v1/agents/#`` counted for ``--steady-s``).

Run: .venv/bin/python -m benchmarks.bench_fleet [--agents 1000] [--processes 4] [--soak 10]
     [--fail-rate 0.05] [--steady-s 120] [--real-agents 3] [--view-only]

Needs mosquitto (and docker-registry for the real agents): scripts/system-deps.sh. The
simulated agents verify every desired state's signature and revision as the agent does and
"deploy" in 0.2-1.0 s; they fail refs under ``/bad/`` at ``--fail-rate`` (by a stable hash of
their id).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from edge_agent.fleet import protocol as p  # noqa: E402
from edge_agent.fleet.link import make_client  # noqa: E402

# -------------------------------------------------------------------------------- simulator


class SimAgent:
    """One simulated agent: presence with a last will, the group's desired state verified,
    a fake deploy, retained status, a metrics summary every ``metrics_s``."""

    def __init__(self, agent_id: str, group: str, broker: p.BrokerAddress, trusted: Any,
                 fail_rate: float, metrics_s: float) -> None:
        self.agent_id, self.group, self.trusted = agent_id, group, trusted
        self.fail_rate, self.metrics_s = fail_rate, metrics_s
        self.revision, self.digest = 0, ""
        self.models: dict[str, dict[str, Any]] = {}
        self.lock = threading.Lock()
        self.client = make_client(f"sim-{agent_id}", broker, will=(
            p.presence_topic(agent_id), p.presence_document(agent_id, group, False)))
        self.client.on_connect = self._on_connect
        self.client.on_message = self._on_message
        self.broker = broker

    def start(self) -> None:
        self.client.connect_async(self.broker.host, self.broker.port, keepalive=60)
        self.client.loop_start()

    def stop(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any,
                    properties: Any) -> None:
        client.publish(p.presence_topic(self.agent_id), p.presence_document(
            self.agent_id, self.group, True, name=self.agent_id, arch="x86_64",
            profile="x86_64-cpu-onnxruntime", agent_version="sim"), qos=1, retain=True)
        client.subscribe(p.group_desired_topic(self.group), 1)

    def _fails(self, ref: str) -> bool:
        if "/bad/" not in ref:
            return False
        h = hashlib.sha256(f"{self.agent_id}|{ref}".encode()).digest()
        return int.from_bytes(h[:8], "big") / 2**64 < self.fail_rate

    def _on_message(self, client: Any, userdata: Any, message: Any) -> None:
        payload = bytes(message.payload)
        if not payload:
            return
        try:
            desired, _ = p.verify_desired(payload, self.trusted)
            p.check_revision(desired, self.revision, self.digest, p.document_digest(payload))
        except p.FleetProtocolError:
            return
        self.revision, self.digest = desired.revision, p.document_digest(payload)
        targets = desired.targets_for(self.agent_id)
        changes = {m: t for m, t in targets.items()
                   if (self.models.get(m) or {}).get("ref") != t.ref
                   or (self.models.get(m) or {}).get("state") != "ok"}
        if not changes:
            self._publish_status()
            return
        threading.Timer(random.uniform(0.2, 1.0), self._deployed, (changes,)).start()

    def _deployed(self, changes: dict[str, p.ModelTarget]) -> None:
        with self.lock:
            for model, target in changes.items():
                if self._fails(target.ref):
                    self.models[model] = {"ref": target.ref, "state": "failed", "version": 1,
                                          "error": "parity: max abs error 0.4 > 0.001"}
                else:
                    self.models[model] = {"ref": target.ref, "state": "ok", "version": 2}
        self._publish_status()

    def _publish_status(self) -> None:
        with self.lock:
            models = {m: p.ModelStatus(d["ref"], d["state"], d["version"], d.get("error", ""))
                      for m, d in self.models.items()}
        self.client.publish(p.status_topic(self.agent_id), p.status_document(
            self.agent_id, self.group, self.revision, models, None, time.time()), qos=1,
            retain=True)

    def publish_metrics(self) -> None:
        body = {"agent": self.agent_id, "at": round(time.time()),
                "models": {"mlp:2": {"rps": 12.5, "errors": 0, "p95_ms": 3.12}},
                "rss_mib": 143, "cpu": 7}
        self.client.publish(p.metrics_topic(self.agent_id),
                            json.dumps(body, separators=(",", ":")).encode(), qos=0)


def run_worker(args: argparse.Namespace) -> int:
    """One simulator process: ``--count`` agents until stdin closes."""
    from packager.bundle.signing import load_public_key

    broker = p.parse_broker_url(args.broker)
    trusted = [load_public_key(Path(args.trust))]
    agents = [SimAgent(f"sim-{args.first + i:05d}", args.group, broker, trusted,
                       args.fail_rate, args.metrics_s) for i in range(args.count)]
    for a in agents:
        a.start()
        time.sleep(0.002)  # a connect storm of its own is not what we measure
    print("started", flush=True)
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    offset = random.uniform(0, args.metrics_s)
    next_at = time.monotonic() + offset
    while not stop.wait(0.5):
        if time.monotonic() >= next_at:
            next_at += args.metrics_s
            for a in agents:
                a.publish_metrics()
    for a in agents:
        a.stop()
    return 0


# -------------------------------------------------------------------------------- the bench


@contextlib.contextmanager
def simulators(broker_url: str, group: str, trust: Path, agents: int, processes: int,
               fail_rate: float, metrics_s: float) -> Iterator[None]:
    procs: list[subprocess.Popen[str]] = []
    per = -(-agents // processes)
    try:
        for i in range(processes):
            count = min(per, agents - i * per)
            if count <= 0:
                break
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "benchmarks.bench_fleet", "--worker", "--broker",
                 broker_url, "--group", group, "--trust", str(trust), "--first",
                 str(i * per), "--count", str(count), "--fail-rate", str(fail_rate),
                 "--metrics-s", str(metrics_s)], cwd=ROOT, text=True,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE))
        for proc in procs:
            assert proc.stdout is not None
            proc.stdout.readline()
        yield
    finally:
        for proc in procs:
            with contextlib.suppress(OSError):
                assert proc.stdin is not None
                proc.stdin.close()
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def count_online(broker: Any, group: str) -> int:
    return sum(a.online for a in broker.group_agents(group))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--broker", help=argparse.SUPPRESS)
    ap.add_argument("--group", default="")
    ap.add_argument("--trust", help=argparse.SUPPRESS)
    ap.add_argument("--first", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--metrics-s", type=float, default=60.0)
    ap.add_argument("--agents", type=int, default=1000)
    ap.add_argument("--processes", type=int, default=4)
    ap.add_argument("--soak", type=float, default=10.0)
    ap.add_argument("--fail-rate", type=float, default=0.05)
    ap.add_argument("--steady-s", type=float, default=120.0)
    ap.add_argument("--real-agents", type=int, default=3)
    ap.add_argument("--view-only", action="store_true", help="measure the views (1.) only")
    args = ap.parse_args()
    if args.worker:
        return run_worker(args)
    return bench(args)


def bench(args: argparse.Namespace) -> int:
    import resource
    import uuid

    from console.fleet_broker import FleetBroker
    from console.fleet_rollout import FailureBudget, Rollout, parse_waves
    from packager.bundle.signing import load_private_key
    from tests.support.bundles import build_all
    from tests.support.mosquitto import running_mosquitto

    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # the broker holds a socket per
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # agent (inherits the limit)
    group = f"bench-{uuid.uuid4().hex[:6]}"
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp, \
            running_mosquitto(Path(tmp) / "mosquitto") as mq, contextlib.ExitStack() as stack:
        root = Path(tmp)
        print(f"building bundles ... (group {group}, broker {mq.url})", flush=True)
        bundles = build_all(root / "bundles")
        key = load_private_key(bundles.private_key)
        refs = {"v1": "oci://sim.invalid/edge/mlp@sha256:" + "1" * 64,
                "v2": "oci://sim.invalid/edge/mlp@sha256:" + "2" * 64,
                "v3": "oci://sim.invalid/bad/mlp@sha256:" + "3" * 64}
        total = args.agents
        if args.real_agents:
            from console.commands import resolve_reference
            from packager.cli import main as edge_pack
            from tests.fleet.conftest import fleet_agent
            from tests.registry.registry_proc import running_registry

            reg = stack.enter_context(running_registry(root / "registry"))
            for name, (version, repo) in {"v1": (1, "edge"), "v2": (2, "edge"),
                                          "v3": (3, "bad")}.items():
                ref = f"oci://{reg.address}/{repo}/mlp:{version}"
                assert edge_pack(["push", str(bundles.mlp[version]), ref, "--insecure",
                                  "-q"]) == 0
                refs[name] = resolve_reference(ref, insecure=True).reference.pinned()
            for i in range(args.real_agents):
                stack.enter_context(fleet_agent(
                    root / f"real{i}", bundles, mq, group, f"real-{i}",
                    allow=[f"{reg.address}/edge", f"{reg.address}/bad"],
                    insecure=[reg.address]))
            total += args.real_agents
        started = time.monotonic()
        stack.enter_context(simulators(mq.url, group, bundles.public_key, args.agents,
                                       args.processes, args.fail_rate, args.metrics_s))
        print(f"{args.agents} simulated agents connected in "
              f"{time.monotonic() - started:.1f} s", flush=True)

        # 1. the fleet view
        t0 = time.monotonic()
        out = subprocess.run([sys.executable, "-m", "console.cli", "fleet", "agents",
                              "--broker", mq.url, "--group", group, "--json"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
        view_s = time.monotonic() - t0
        listed = len(json.loads(out))
        print(f"1. fleet view: {listed} of {total} agents listed by `edge-console fleet "
              f"agents --json` in {view_s:.2f} s (process start included)", flush=True)
        print(f"   the TUI (--broker, headless): its broker panel counts {total} agents "
              f"{tui_view_s(mq.url, group, total):.2f} s after the app started", flush=True)
        if args.view_only:
            return 0

        with FleetBroker(mq.url) as console:
            console.settle()
            assert console.wait_until(lambda: count_online(console, group) >= total, 60)
            console.publish(p.Desired(group, 1, {"mlp": p.ModelTarget(refs["v1"])}), key)
            console.wait_until(lambda: all(a.model_state("mlp", refs["v1"]) == "ok"
                                           for a in console.group_agents(group)), 300)
            # 2. four waves, nobody failing
            def roll(ref: str) -> tuple[Any, float]:
                t0 = time.monotonic()
                result = Rollout(console, group, key, say=lambda s: print("   ", s, flush=True),
                                 converge_timeout_s=120).run(
                    {"mlp": p.ModelTarget(ref)}, parse_waves("1,5%,25%,100%"), args.soak,
                    FailureBudget.parse("2%"))
                return result, time.monotonic() - t0

            result, took = roll(refs["v2"])
            print(f"2. four-wave rollout to {total} agents, soak {args.soak:g} s: "
                  f"{'halted' if result.halted else 'complete'} in {took:.1f} s (target "
                  f"<= {4 * args.soak + 30:g} s); waves "
                  f"{[len(w.members) for w in result.waves]}", flush=True)
            # 3. a failing candidate
            result, took = roll(refs["v3"])
            last = result.waves[-1]
            print(f"3. with {args.fail_rate:.0%} of simulated agents failing: "
                  f"{'halted' if result.halted else 'NOT halted'} in wave {last.wave} "
                  f"({len(last.failed)} of {len(last.members)} failed) after {took:.1f} s; "
                  f"restored {len(result.restored)} agent(s), not restored "
                  f"{len(result.not_restored)}", flush=True)
            # 4. steady state
            count, size = [0], [0]
            lock = threading.Lock()
            watcher = make_client(f"bench-count-{uuid.uuid4().hex[:6]}", mq_address(mq.url))

            def counted(client: Any, userdata: Any, message: Any) -> None:
                if message.retain:
                    return
                with lock:
                    count[0] += 1
                    # PUBLISH: fixed header ~3, topic length + 2, properties 1, packet id 2
                    size[0] += len(message.payload) + len(message.topic) + 8

            watcher.on_message = counted
            watcher.connect(mq_address(mq.url).host, mq_address(mq.url).port)
            watcher.subscribe("edge/v1/agents/#", 0)
            watcher.loop_start()
            time.sleep(args.steady_s)
            watcher.disconnect()
            watcher.loop_stop()
            per_min = count[0] / total / (args.steady_s / 60)
            per_day = size[0] / total / args.steady_s * 86400
            print(f"4. steady state over {args.steady_s:g} s: {count[0]} messages from "
                  f"{total} agents = {per_min:.2f} per agent per minute; "
                  f"{per_day / 1024:.0f} KiB per agent per day (payload + MQTT headers, "
                  f"keep-alive pings not counted: 4 bytes per keepalive_s)", flush=True)
    return 0


def tui_view_s(url: str, group: str, total: int, deadline_s: float = 120.0) -> float:
    """Seconds from the console TUI's start with ``--broker`` (headless, Textual's test
    driver) until its broker panel counts ``total`` agents of ``group``."""
    import asyncio

    from console.app import EdgeConsoleApp
    from console.config import BrokerSettings, ConsoleSettings
    from console.fleet_view import BrokerAgents

    async def run() -> float:
        app = EdgeConsoleApp(ConsoleSettings(discovery=False, broker=BrokerSettings(url, group)))
        t0 = time.monotonic()
        async with app.run_test(size=(160, 50)) as pilot:
            panel = app.screen.query_one(BrokerAgents)
            while f"\n{total} agents:" not in str(panel.query_one("#summary").render()):
                if time.monotonic() - t0 > deadline_s:
                    raise TimeoutError(f"the TUI did not count {total} agents in "
                                       f"{deadline_s:g} s")
                await pilot.pause(0.05)
            return time.monotonic() - t0

    return asyncio.run(run())


def mq_address(url: str) -> p.BrokerAddress:
    return p.parse_broker_url(url)


if __name__ == "__main__":
    raise SystemExit(main())
