"""Soak: sustained concurrent load on one agent with a hot swap every N seconds.

    python -m benchmarks.bench_soak                  # 10 minutes, a swap every 30 s, c=8
    python -m benchmarks.bench_soak --minutes 1 --swap-every 10
    python -m benchmarks.bench_soak --idle-streams 32 --amplifiers 1   # issue 19: under abuse
    python -m benchmarks.bench_soak --concurrency 4 --attacks all --baseline  # issue 27

An ``edge-agent serve`` subprocess (127.0.0.1, mDNS off) serves the sample MLP; ``concurrency``
closed-loop callers (one gRPC channel each) send ModelInfer without pause while a swapper
alternately deploys version 2 and version 1 (upload, verify, load, warm-up, probe, switch,
drain, unload). Reports: failed requests (target 0), the RSS of the agent and its runtime
processes (models isolated in processes of their own) after warm-up and at the
end (target: growth < 5 %), the sizes of metrics.db and state.db (with their WAL) against the
metrics cap, and p99 latency per window over time. ``--idle-streams N`` holds N
ModelStreamInfer streams that never send (reopened whenever the agent closes them) and
``--amplifiers K`` runs K callers asking for one output 20,000 times (refused) alongside: the
legitimate callers must still see 0 failures and the RSS must stay bounded. ``--attacks``
runs the hostile callers registered in ``benchmarks/attacks`` (issue 27) alongside, against
every port the agent opens (gRPC over TCP and its Unix socket, HTTP, management);
``--baseline`` first runs the same soak without them on a fresh agent and reports the ratio of
the legitimate p99s; its pass criterion for RSS (issue 27: within 10 % of start) takes the
RSS at start as the median over the first 20 % of the run after ``--warmup`` (the legitimate
callers and the attacks warmed up: in its first seconds the agent grows by the bytes the
attacks hold in flight, up to the budgets of docs/security.md, not by a leak); the RSS of the
first 5 s is reported too. The attacks run in a process of their own (as a hostile local user's
would; in this process they would share the legitimate callers' GIL), each attack on a
connection of its own; ``--attackers-cpu CORES`` caps that process in a cgroup (root, cgroup v1
cpu controller) to tell the agent's cost of the attacks from the attackers' own CPU. The
report gives the CPU seconds of the agent and of the attackers, and how long each hot swap
took. ``soak()`` is the library entry the test suite runs for ~30 s
(tests/reliability/test_soak.py).
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import queue
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

INFER = "/inference.GRPCInferenceService/ModelInfer"
STREAM = "/inference.GRPCInferenceService/ModelStreamInfer"
from benchmarks.attacks import ATTACKS, Tally, Target  # noqa: E402
from benchmarks.attacks import agent_args as attack_args  # noqa: E402
from benchmarks.attacks import load as load_attack  # noqa: E402

METRICS_CAP_BYTES = 256 * 1024 * 1024  # MetricsStore's default max_bytes


@dataclass
class SoakReport:
    """What one soak run measured."""

    seconds: float
    requests: int = 0
    failed: int = 0
    failures: list[str] = field(default_factory=list)  # the first few, for the message
    swaps: int = 0
    swap_failures: list[str] = field(default_factory=list)
    swap_s: list[float] = field(default_factory=list)  # how long each hot swap took
    rss_mib: list[tuple[float, float]] = field(default_factory=list)  # (t, MiB)
    p99_ms: list[tuple[float, float, int]] = field(default_factory=list)  # (t, p99, n)
    metrics_db_bytes: int = 0
    state_db_bytes: int = 0
    warmup_s: float = 0.0
    idle_streams: int = 0  # held open by the abuser (reopened when closed)
    idle_stream_closes: int = 0  # times the agent closed one (idle timeout, caps)
    amplified: int = 0  # amplification requests sent
    amplified_refused: int = 0  # ... answered INVALID_ARGUMENT
    attacks: dict[str, dict[str, int]] = field(default_factory=dict)  # name -> its tally
    agent_cpu_s: float = 0.0  # CPU seconds of the agent and its runtime processes, in the run
    attackers_cpu_s: float = 0.0  # ... of the attackers' process

    def p99_overall_ms(self) -> float:
        """The median of the per-window p99s after warm-up (ms)."""
        p99s = [p for t, p, n in self.p99_ms if n and t >= self.warmup_s]
        return statistics.median(p99s) if p99s else float("nan")

    def rss_at_start(self) -> float:
        """Median RSS over the first 5 s of the run, before any attack has grown it (MiB)."""
        head = [m for t, m in self.rss_mib if t < 5.0] or [m for _, m in self.rss_mib[:1]]
        return statistics.median(head) if head else float("nan")

    def rss_after_warmup(self) -> float:
        """Median RSS over the first 20 % of the time after warm-up (MiB)."""
        after = [m for t, m in self.rss_mib if t >= self.warmup_s]
        head = after[:max(1, len(after) // 5)]
        return statistics.median(head) if head else float("nan")

    def rss_at_end(self) -> float:
        """Median RSS over the last 20 % of the run (MiB)."""
        after = [m for t, m in self.rss_mib if t >= self.warmup_s]
        tail = after[-max(1, len(after) // 5):]
        return statistics.median(tail) if tail else float("nan")

    def rss_growth(self) -> float:
        """Relative RSS growth from after warm-up to the end (0.03 = 3 %)."""
        return self.rss_at_end() / self.rss_after_warmup() - 1.0


def _payload() -> bytes:
    from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb

    x = np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)
    msg = pb.ModelInferRequest(model_name="mlp")
    msg.inputs.add(name="input", datatype="FP32", shape=x.shape)
    msg.raw_input_contents.append(x.tobytes())
    return msg.SerializeToString()


def _amplified_payload(copies: int = 20_000) -> bytes:
    """A request that names the output ``probs`` ``copies`` times (issue 19's amplifier)."""
    from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb

    msg = pb.ModelInferRequest.FromString(_payload())
    for _ in range(copies):
        msg.outputs.add(name="probs")
    return msg.SerializeToString()


def _idle_stream_holder(target: str, stop: threading.Event, report: SoakReport,
                        lock: threading.Lock) -> None:
    """One stream that never sends, reopened whenever the agent closes it."""
    def silent():  # type: ignore[no-untyped-def]
        stop.wait()
        return
        yield b""  # pragma: no cover - makes this a generator

    with grpc.insecure_channel(target) as channel:
        call = channel.stream_stream(STREAM)
        while not stop.is_set():
            responses = call(silent())
            with contextlib.suppress(grpc.RpcError):
                for _ in responses:
                    pass
            if not stop.is_set():
                with lock:
                    report.idle_stream_closes += 1
                stop.wait(0.2)
            responses.cancel()


def _amplifier(target: str, stop: threading.Event, report: SoakReport,
               lock: threading.Lock) -> None:
    payload = _amplified_payload()
    with grpc.insecure_channel(target, options=[
            ("grpc.max_send_message_length", 64 << 20)]) as channel:
        call = channel.unary_unary(INFER)
        while not stop.is_set():
            refused = False
            try:
                call(payload, timeout=30)
            except grpc.RpcError as exc:
                refused = exc.code() == grpc.StatusCode.INVALID_ARGUMENT
            with lock:
                report.amplified += 1
                report.amplified_refused += refused


def _db_bytes(state_dir: Path, name: str) -> int:
    return sum(p.stat().st_size for p in state_dir.glob(name + "*") if p.is_file())


def tree_rss_mib(proc: psutil.Process) -> float:
    """RSS of the agent and its runtime processes (isolated models), in MiB."""
    total = 0
    for p in (proc, *proc.children(recursive=True)):
        with contextlib.suppress(psutil.NoSuchProcess):  # replaced during a swap
            total += p.memory_info().rss
    return total / 2**20


def cpu_seconds(proc: psutil.Process) -> float:
    """User + system CPU seconds of ``proc`` and its living children."""
    total = 0.0
    for p in (proc, *proc.children(recursive=True)):
        with contextlib.suppress(psutil.NoSuchProcess):
            t = p.cpu_times()
            total += t.user + t.system
    return total


def _attack_process(names: list[str], target: Target, stop: Any, out: Any) -> None:
    """The attacks ``names``, each on a thread, until ``stop`` (a process Event); their
    tallies put on ``out``."""
    tallies = {name: Tally() for name in names}
    threads = [threading.Thread(target=load_attack(name), daemon=True, name=f"attack-{name}",
                                args=(target, stop, tallies[name])) for name in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put({name: dict(t.counts) for name, t in tallies.items()})


CPU_CGROUPS = Path("/sys/fs/cgroup/cpu")  # cgroup v1's cpu controller
CFS_PERIOD_US = 100_000


class CpuCap:
    """A cgroup (v1 cpu controller) of its own that caps the processes put in it at ``cores``
    CPUs (CFS quota), as a hostile local user's processes would be capped by the device's
    scheduler share; removed by :meth:`close`. Needs root and a writable cgroup v1 cpu tree."""

    def __init__(self, cores: float) -> None:
        import os

        self.path = CPU_CGROUPS / f"edge-soak-attackers-{os.getpid()}"
        try:
            self.path.mkdir()
            (self.path / "cpu.cfs_period_us").write_text(str(CFS_PERIOD_US))
            (self.path / "cpu.cfs_quota_us").write_text(str(int(cores * CFS_PERIOD_US)))
        except OSError as exc:
            self.close()
            raise SystemExit(f"--attackers-cpu needs a writable {CPU_CGROUPS} (root, cgroup "
                             f"v1): {exc}") from None

    def add(self, pid: int) -> None:
        """Put process ``pid`` (all its threads, and its children from now on) in the cap."""
        (self.path / "cgroup.procs").write_text(str(pid))

    def close(self) -> None:
        """Move what is left back to the root group and remove the cgroup."""
        with contextlib.suppress(OSError):
            for pid in (self.path / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    (CPU_CGROUPS / "cgroup.procs").write_text(pid)
        with contextlib.suppress(OSError):
            self.path.rmdir()


class Attackers:
    """The hostile callers in a process of their own, as a hostile local user would run them
    (in the soak's own process they would share its GIL, and the legitimate callers' latency
    would measure the attackers' Python as well as the agent's). ``cpu_cores``: cap that
    process (and its children) at that many CPUs (:class:`CpuCap`)."""

    def __init__(self, names: list[str], target: Target, cpu_cores: float = 0.0) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._stop = ctx.Event()
        self._out: Any = ctx.Queue()
        self._proc = ctx.Process(target=_attack_process, name="soak-attacks", daemon=True,
                                 args=(names, target, self._stop, self._out))
        self._cap = CpuCap(cpu_cores) if cpu_cores > 0 else None
        self._proc.start()
        if self._cap is not None:
            self._cap.add(self.pid)

    @property
    def pid(self) -> int:
        """The attackers' process id."""
        assert self._proc.pid is not None
        return self._proc.pid

    def stop(self) -> dict[str, dict[str, int]]:
        """Stop the attacks and return their tallies (empty if the process failed)."""
        self._stop.set()
        try:
            tallies: dict[str, dict[str, int]] = self._out.get(timeout=120)
        except queue.Empty:
            tallies = {}
        self._proc.join(30)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(30)
        if self._cap is not None:
            self._cap.close()
        return tallies


def soak(grpc_address: str, deploy: Callable[[int], tuple[bool, str]], agent_pid: int,
         state_dir: Path, *, seconds: float, swap_every_s: float, concurrency: int = 8,
         warmup_s: float = 10.0, window_s: float = 10.0,
         on_window: Callable[[float, float, float, int], None] | None = None,
         idle_streams: int = 0, amplifiers: int = 0,
         attacks: Sequence[str] = (), target: Target | None = None,
         attackers_cpu: float = 0.0) -> SoakReport:
    """Load ``grpc_address`` for ``seconds`` while ``deploy(version)`` swaps every
    ``swap_every_s`` (versions 2, 1, 2, ...); sample the agent's RSS once a second.
    ``idle_streams`` and ``amplifiers``: abusers alongside (see the module docstring);
    ``attacks``: names registered in ``benchmarks.attacks``, run against ``target`` (their
    process capped at ``attackers_cpu`` CPUs when > 0)."""
    report = SoakReport(seconds=seconds, warmup_s=warmup_s, idle_streams=idle_streams)
    payload = _payload()
    stop = threading.Event()
    lock = threading.Lock()
    latencies: list[float] = []  # of the current window
    t_start = time.monotonic()

    def caller() -> None:
        with grpc.insecure_channel(grpc_address) as channel:
            call = channel.unary_unary(INFER)
            while not stop.is_set():
                t0 = time.perf_counter()
                try:
                    call(payload, timeout=30)
                    ok, why = True, ""
                except grpc.RpcError as exc:
                    ok, why = False, f"{exc.code()}: {exc.details()}"
                took = time.perf_counter() - t0
                with lock:
                    report.requests += 1
                    if ok:
                        latencies.append(took)
                    else:
                        report.failed += 1
                        if len(report.failures) < 5:
                            report.failures.append(why)

    def swapper() -> None:
        version = 2
        next_at = t_start + swap_every_s
        while not stop.wait(max(0.0, next_at - time.monotonic())):
            began = time.monotonic()
            ok, message = deploy(version)
            report.swap_s.append(time.monotonic() - began)
            report.swaps += 1
            if not ok:
                report.swap_failures.append(f"swap {report.swaps} to v{version}: {message}")
            version = 1 if version == 2 else 2
            next_at += swap_every_s

    threads = [threading.Thread(target=caller, daemon=True) for _ in range(concurrency)]
    threads.append(threading.Thread(target=swapper, daemon=True))
    threads += [threading.Thread(target=_idle_stream_holder, daemon=True,
                                 args=(grpc_address, stop, report, lock))
                for _ in range(idle_streams)]
    threads += [threading.Thread(target=_amplifier, daemon=True,
                                 args=(grpc_address, stop, report, lock))
                for _ in range(amplifiers)]
    attackers = None
    if attacks:
        if target is None:
            raise ValueError("attacks need a target")
        attackers = Attackers(list(attacks), target, attackers_cpu)
    for t in threads:
        t.start()
    proc = psutil.Process(agent_pid)
    agent_cpu0 = cpu_seconds(proc)
    window_end = t_start + window_s
    try:
        while (now := time.monotonic()) < t_start + seconds:
            report.rss_mib.append((now - t_start, tree_rss_mib(proc)))
            if now >= window_end:
                with lock:
                    window, latencies[:] = list(latencies), []
                p99 = float(np.percentile(window, 99)) * 1000 if window else float("nan")
                report.p99_ms.append((now - t_start, p99, len(window)))
                if on_window is not None:
                    on_window(now - t_start, p99, report.rss_mib[-1][1], report.failed)
                window_end += window_s
            time.sleep(1.0)
    finally:
        report.agent_cpu_s = cpu_seconds(proc) - agent_cpu0
        if attackers is not None:
            with contextlib.suppress(psutil.NoSuchProcess):
                report.attackers_cpu_s = cpu_seconds(psutil.Process(attackers.pid))
        stop.set()
        if attackers is not None:
            report.attacks = attackers.stop()
        for t in threads:
            t.join(60)
    report.metrics_db_bytes = _db_bytes(state_dir, "metrics.db")
    report.state_db_bytes = _db_bytes(state_dir, "state.db")
    return report


def print_report(r: SoakReport) -> None:
    """The figures, one per line."""
    print(f"soak: {r.seconds / 60:.1f} min, {r.swaps} hot swaps, {r.requests} requests")
    print(f"  failed requests            {r.failed}  (target 0){'  ' if r.failures else ''}"
          f"{'; '.join(r.failures)}")
    print(f"  failed swaps               {len(r.swap_failures)}  {'; '.join(r.swap_failures)}")
    if r.swap_s:
        print(f"  hot swap took              median {statistics.median(r.swap_s):.1f} s, max "
              f"{max(r.swap_s):.1f} s (its uploaded file is in incoming/ meanwhile)")
    print(f"  RSS after warm-up / end    {r.rss_after_warmup():.1f} MiB / {r.rss_at_end():.1f} "
          f"MiB = {r.rss_growth() * 100:+.1f} %  (target < 5 %); max "
          f"{max(m for _, m in r.rss_mib):.1f} MiB")
    print(f"  metrics.db (+WAL)          {r.metrics_db_bytes / 2**20:.2f} MiB of the "
          f"{METRICS_CAP_BYTES / 2**20:.0f} MiB cap; state.db (+WAL) "
          f"{r.state_db_bytes / 2**20:.2f} MiB")
    if r.idle_streams or r.amplified:
        print(f"  abuse alongside            {r.idle_streams} idle streams held (closed by the "
              f"agent {r.idle_stream_closes} times, reopened at once); {r.amplified} amplified "
              f"requests, {r.amplified_refused} refused INVALID_ARGUMENT")
    for name, counts in r.attacks.items():
        shown = ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "nothing counted"
        print(f"  attack {name}: {shown}")
    if r.attacks:
        print(f"  RSS first 5 s / end        {r.rss_at_start():.1f} / {r.rss_at_end():.1f} MiB = "
              f"{(r.rss_at_end() / r.rss_at_start() - 1) * 100:+.1f} %  (the attacks' bytes "
              "in flight included; the target is on RSS after warm-up, above)")
    print(f"  CPU seconds in the run      agent {r.agent_cpu_s:.0f}, attackers' process "
          f"{r.attackers_cpu_s:.0f} (of {r.seconds * (psutil.cpu_count() or 1):.0f} on "
          f"{psutil.cpu_count()} cores)")
    p99s = [p for _, p, n in r.p99_ms if n]
    if p99s:
        print(f"  p99 per window             first {p99s[0]:.1f} ms, last {p99s[-1]:.1f} ms, "
              f"median {statistics.median(p99s):.1f} ms, max {max(p99s):.1f} ms; after "
              f"warm-up (median) {r.p99_overall_ms():.1f} ms")


def _attack_names(spec: str) -> list[str]:
    if not spec:
        return []
    names = sorted(ATTACKS) if spec == "all" else [n.strip() for n in spec.split(",") if n]
    unknown = [n for n in names if n not in ATTACKS]
    if unknown:
        raise SystemExit(f"unknown attack(s) {', '.join(unknown)}; registered: "
                         f"{', '.join(sorted(ATTACKS)) or 'none'}")
    return names


def run_once(args: argparse.Namespace, attacks: Sequence[str], label: str) -> SoakReport:
    """One soak on a fresh agent (its own state directory, keys and bundles)."""
    from benchmarks.bench_swap import Agent
    from edge_agent.deploy.device import detect_device
    from packager.build import build_bundles
    from packager.bundle.signing import generate_keypair
    from packager.samples import make_mlp

    with tempfile.TemporaryDirectory(prefix="edge-soak-") as tmp:
        work = Path(tmp)
        profile = detect_device().profile
        private, public = generate_keypair(work / "keys")
        bundles = {}
        for v in (1, 2):
            src = make_mlp(work / f"mlp{v}.onnx", seed=v)
            (bundles[v],) = build_bundles(src, name="mlp", version=v, profiles=[profile],
                                          out_dir=work / "b", key_path=private,
                                          dynamic_batch=True)
        extra: list[str] = []
        uds = work / "infer.sock"
        if attacks:  # every port open, so that every front end is attacked
            extra = ["--http", "127.0.0.1:0", "--uds", str(uds), *attack_args(list(attacks))]
            if args.config:
                extra += ["--config", str(args.config)]
        agent = Agent(work / "state", public, *extra)
        if attacks:
            agent.args.remove("--no-uds")
        agent.start()
        try:
            with agent.client() as client:
                first = client.deploy(bundles[1])
                if not first.ok:
                    raise SystemExit(f"the first deploy failed: {first.message}")

                def deploy(version: int) -> tuple[bool, str]:
                    result = client.deploy(bundles[version])
                    return result.ok, result.message

                print(f"{label}: soaking {args.minutes:g} min, c={args.concurrency}, a swap "
                      f"every {args.swap_every:g} s (profile {profile})"
                      + (f", attacks: {', '.join(attacks)}" if attacks else ""))
                assert agent.proc is not None
                target = Target(grpc=agent.grpc, http=agent.http or None,
                                management=agent.mgmt, uds=uds if attacks else None,
                                state_dir=agent.state)
                report = soak(agent.grpc, deploy, agent.proc.pid, agent.state,
                              seconds=args.minutes * 60, swap_every_s=args.swap_every,
                              concurrency=args.concurrency, warmup_s=args.warmup,
                              window_s=args.window, idle_streams=args.idle_streams,
                              amplifiers=args.amplifiers, attacks=attacks, target=target,
                              attackers_cpu=args.attackers_cpu,
                              on_window=lambda t, p, m, f: print(
                                  f"  t={t:6.0f} s  p99 {p:6.1f} ms  RSS {m:6.1f} MiB  "
                                  f"failed {f}", flush=True))
        finally:
            agent.stop()
        print_report(report)
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="how long to run (10)")
    parser.add_argument("--swap-every", type=float, default=30.0,
                        help="seconds between hot swaps (30)")
    parser.add_argument("--concurrency", type=int, default=8, help="closed-loop callers (8)")
    parser.add_argument("--warmup", type=float, default=60.0,
                        help="seconds before the RSS baseline is taken (60)")
    parser.add_argument("--window", type=float, default=30.0,
                        help="seconds per p99 window (30)")
    parser.add_argument("--idle-streams", type=int, default=0,
                        help="streams that never send, held alongside (issue 19: 32)")
    parser.add_argument("--amplifiers", type=int, default=0,
                        help="callers asking for one output 20,000 times, alongside")
    parser.add_argument("--attacks", default="", metavar="all|NAME,...",
                        help="hostile callers of benchmarks/attacks to run alongside "
                             f"(registered: {', '.join(sorted(ATTACKS)) or 'none'})")
    parser.add_argument("--baseline", action="store_true",
                        help="first run the same soak without attacks, and compare p99s")
    parser.add_argument("--config", type=Path, help="agent.toml for the attacked agent")
    parser.add_argument("--attackers-cpu", type=float, default=0.0, metavar="CORES",
                        help="cap the attackers' process at this many CPUs (a cgroup; root): "
                             "the agent's cost of the attacks apart from the attackers' own")
    args = parser.parse_args()
    attacks = _attack_names(args.attacks)

    base = run_once(args, [], "baseline") if args.baseline and attacks else None
    report = run_once(args, attacks, "under attack" if attacks else "soak")
    ok = report.failed == 0 and not report.swap_failures
    if attacks:  # "RSS at start": after the warm-up (see the module docstring)
        growth = report.rss_growth()
        ok = ok and abs(growth) <= 0.10
        if base is not None:
            ratio = report.p99_overall_ms() / base.p99_overall_ms()
            print(f"legitimate p99 under attack / without: {report.p99_overall_ms():.1f} / "
                  f"{base.p99_overall_ms():.1f} ms = {ratio:.2f}x  (target <= 3x)")
            ok = ok and ratio <= 3.0
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
