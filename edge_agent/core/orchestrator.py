"""Model orchestration: the memory budget, load on demand and unload when idle.

The repository asks :meth:`Orchestrator.loading` around every load (one load at a time: room
is made first, by unloading least recently used idle versions, then the load's memory is
measured); the data plane asks :meth:`Orchestrator.acquire` when a request names a model that
is not loaded (on-demand models, and models this orchestrator unloaded). Concurrent first
requests share one load. The accounting and the choice of what to unload are
:mod:`edge_agent.core.residency`; nothing here knows of gRPC.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeoutError
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import psutil

from edge_agent.core import residency
from edge_agent.core.overrides import load_timeout_s
from edge_agent.core.residency import MemoryBudgetError, Resident, mib
from edge_agent.errors import AgentError, ModelNotFoundError, ModelUnavailableError

if TYPE_CHECKING:
    from edge_agent.core.repository import ModelRepository, VersionSlot
    from edge_agent.core.sequences import Sequences
    from packager.bundle.manifest import Manifest

log = logging.getLogger(__name__)

Loader = Callable[[str], "VersionSlot"]
"""Loads the version of a model that should serve (the active one) and returns it."""

LoadedHook = Callable[["VersionSlot", float, "int | None"], None]
"""Hears of each load this orchestrator measured: (version, load ms, the version's memory
figure: the largest RSS growth any of its loads measured)."""

class LoadRaced(ModelUnavailableError):
    """The version a request waited for was unloaded again (for room) before the request was
    routed to it: the request waits for the next load."""


_SWEEP_S = 1.0
SNAPSHOT_NAME = "residency.json"
"""Written to the state directory after each change of what is loaded or serves (the
repository's ``on_change``) and each wait (``edge-agent metrics`` reads it: the counters live
in the agent's memory)."""
_NS = 1_000_000_000


def process_rss() -> int:
    """Resident bytes of this process and its children (runtime processes of isolated models)."""
    proc = psutil.Process()
    total = int(proc.memory_info().rss)
    for child in proc.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            total += int(child.memory_info().rss)
    return total


def _glibc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        if libc is None or not hasattr(libc, "malloc_trim") or not hasattr(libc, "mallopt"):
            return None  # not glibc: nothing to trim with
    except OSError:
        return None
    libc.malloc_trim.argtypes, libc.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
    libc.mallopt.argtypes, libc.mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return libc


_LIBC = _glibc()
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 128 << 10


def map_large_allocations() -> None:
    """Have glibc map every allocation of 128 KiB or more on its own (a fixed
    ``M_MMAP_THRESHOLD``): freeing it returns it to the kernel at once. glibc otherwise raises
    the threshold after each large free, so a model's tensors land in heaps that keep them
    (measured with three 40 MiB CNNs loaded and unloaded in turn: 24-26 MiB stayed resident
    after each unload and ``malloc_trim``, and a loaded model took 84-104 MiB; with the fixed
    threshold 14-16 MiB and 78-80 MiB). Process-wide; called when a memory budget is set."""
    if _LIBC is not None:
        _LIBC.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)


def return_freed_memory() -> None:
    """Give the memory the C allocator keeps after an unload back to the kernel (glibc's
    ``malloc_trim``; measured: an unloaded ONNX Runtime session leaves ~20 MiB resident
    without it, nothing with it)."""
    gc.collect()  # a session kept alive by a reference cycle (a traceback's frames) is freed
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


class FairLock:
    """A reentrant lock granted in arrival order: loads waiting for their turn are served
    first come, first served (a plain lock lets one model's loads starve another's)."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._queue: deque[int] = deque()
        self._owner: int | None = None
        self._depth = 0

    def __enter__(self) -> FairLock:
        me = threading.get_ident()
        with self._cond:
            if self._owner == me:
                self._depth += 1
                return self
            self._queue.append(me)
            while self._owner is not None or self._queue[0] != me:
                self._cond.wait()
            self._queue.popleft()
            self._owner, self._depth = me, 1
        return self

    def __exit__(self, *exc: object) -> None:
        with self._cond:
            self._depth -= 1
            if self._depth == 0:
                self._owner = None
                self._cond.notify_all()


class _PeakSampler:
    """The highest resident memory (this process and its children) seen while it runs."""

    def __init__(self, start: int) -> None:
        self.peak = start
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="edge-load-peak", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, process_rss())

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(1)
        return max(self.peak, process_rss())


@dataclass(slots=True)
class ResidencyStats:
    """What one model's residency did: loads, unloads and the waits of first requests."""

    loads: int = 0
    on_demand_loads: int = 0
    unloads: int = 0
    waits: int = 0
    wait_ns: int = 0
    last_wait_ns: int = 0
    last_unload: str = ""
    loading: bool = False
    waiting: int = 0
    claims: int = 0  # requests a load was for, not yet routed to it (it is not evicted)

    def copy(self) -> ResidencyStats:
        return ResidencyStats(self.loads, self.on_demand_loads, self.unloads, self.waits,
                              self.wait_ns, self.last_wait_ns, self.last_unload, self.loading,
                              self.waiting, self.claims)


@dataclass(slots=True)
class _Figures:
    measured: dict[tuple[str, int], int] = field(default_factory=dict)
    # the highest RSS growth seen while a load ran (a load takes more than it keeps)
    load_peak: dict[tuple[str, int], int] = field(default_factory=dict)


class Orchestrator:
    """Keeps the loaded versions within ``budget_bytes`` (None: no budget), loads on demand,
    unloads idle versions. Thread-safe."""

    def __init__(self, repository: ModelRepository, *, budget_bytes: int | None = None,
                 drain_timeout_s: float = 30.0, sequences: Sequences | None = None) -> None:
        self.repository = repository
        # a version with live sequences holds their state: never idle, drained before eviction
        self._sequences = sequences
        self.budget_bytes = budget_bytes
        self._drain_timeout_s = drain_timeout_s
        self._figures = _Figures()
        self._loader: Loader = self._load_latest
        self._active: Callable[[str], int | None] = lambda _name: None
        # a version a served pipeline pins (set by the model manager): never unloaded either
        self._pinned_by_pipeline: Callable[[str, int], bool] = lambda _name, _version: False
        self._on_loaded: LoadedHook | None = None
        self._lock = threading.Lock()
        if budget_bytes is not None:
            map_large_allocations()
            return_freed_memory()  # the empty agent: what it keeps, not what it freed
        self._load_lock = FairLock()  # one load at a time, in arrival order: room, load, measure
        self.empty_rss = process_rss()  # the agent before any budgeted load
        self.measured_bytes = 0  # RSS above empty at the last reconciliation
        self.divergences = 0  # reconciliations that found accounting and RSS > 10 % apart
        self._diverged = False
        self._loads: dict[str, Future[VersionSlot]] = {}
        self._in_load: tuple[str, int] | None = None  # the version loading now (one at a time)
        # loaded, not READY yet (the repository marks it after the load): counted as resident
        self._admitted: dict[tuple[str, int], VersionSlot] = {}
        self._reloadable: set[str] = set()  # unloaded by us: the next request loads it again
        self._held: set[str] = set()  # unloaded by an operator: stays unloaded
        self._unfit: set[str] = set()  # the last load did not fit in the budget
        self._stats: dict[str, ResidencyStats] = {}
        self._stop = threading.Event()
        self._sweeper: threading.Thread | None = None
        self._persist_lock = threading.Lock()  # snapshots are taken and written in order

    # ------------------------------------------------------------------ wiring
    def set_loader(self, loader: Loader, on_loaded: LoadedHook | None = None,
                   active: Callable[[str], int | None] | None = None,
                   pinned: Callable[[str, int], bool] | None = None) -> None:
        """Who loads a model on demand (the model manager: its active version), which
        version that is (for the metadata of a model not loaded yet), and which versions
        pipelines pin (kept loaded like ``pinned = true`` models)."""
        self._loader = loader
        self._on_loaded = on_loaded
        if active is not None:
            self._active = active
        if pinned is not None:
            self._pinned_by_pipeline = pinned

    def version_to_load(self, name: str) -> int | None:
        """The version a request for ``name`` would load (None: none on disk)."""
        active = self._active(name)
        if active is not None:
            return active
        versions = self.repository.scan().get(name)
        return versions[-1] if versions else None

    def seed(self, name: str, version: int, rss_bytes: int | None) -> None:
        """A memory figure measured earlier on this device (the state store's)."""
        if rss_bytes:
            self._note(name, version, rss_bytes)

    def start(self) -> None:
        """Start the idle sweeper (once; a no-op when running)."""
        with self._lock:
            if self._sweeper is not None:
                return
            self._sweeper = threading.Thread(target=self._sweep_loop, name="edge-idle-unload",
                                             daemon=True)
            self._sweeper.start()

    def close(self) -> None:
        self._stop.set()
        if self._sweeper is not None:
            self._sweeper.join(5)

    # ------------------------------------------------------------------ figures
    def memory_of(self, name: str, version: int) -> tuple[int, str]:
        """The best memory figure for a version, and where it comes from."""
        measured = self._figures.measured.get((name, version))
        if measured is not None:
            return measured, "measured on this device"
        manifest = self._manifest(name, version)
        if manifest is not None:
            return self.needed_for(manifest)
        return 0, "unknown"

    def load_peak_of(self, name: str, version: int) -> int | None:
        """The highest resident-memory growth measured while a load of the version ran (None:
        never loaded under this orchestrator)."""
        return self._figures.load_peak.get((name, version))

    def needed_for(self, manifest: Manifest) -> tuple[int, str]:
        """The best memory figure for a version not necessarily on disk yet."""
        measured = self._figures.measured.get((manifest.name, manifest.version))
        if measured is not None:
            return measured, "measured on this device"
        if manifest.load_cost_bytes > 0:
            return manifest.load_cost_bytes, "measured by edge-pack build"
        return sum(f.size for f in manifest.files), "artifact size (never measured)"

    def _manifest(self, name: str, version: int) -> Manifest | None:
        for mv in self.repository.versions(name):
            if mv.version == version and mv.loaded is not None:
                return mv.loaded.manifest
        from packager.bundle.reader import load_extracted

        try:
            return load_extracted(self.repository.models_dir / name / str(version),
                                  verify_hashes=False)
        except Exception:  # any unreadable manifest: no figure
            return None

    def _note(self, name: str, version: int, rss: int) -> None:
        # the largest figure seen (on the safe side: a first load in a process also measures
        # the runtime's start-up; _make_room decides "never fits" on the smallest credible one)
        if rss <= 0:  # nothing measurable (memory freed earlier was reused): no figure
            return
        key = (name, version)
        self._figures.measured[key] = max(rss, self._figures.measured.get(key, 0))

    # ------------------------------------------------------------------ residency
    def residents(self, *, busy_evictable: bool = False,
                  held_evictable: bool = False) -> list[Resident]:
        """The loaded versions as the budget sees them. A version with requests in flight is
        evictable only with ``busy_evictable`` (it is drained first); one that is loading,
        mid-swap or claimed by requests that waited for its load (they are about to be
        routed to it) only with ``held_evictable`` (used to tell "wait" from "never")."""
        out = []
        for name in self.repository.model_names():
            versions = self.repository.versions(name)
            ov = self.repository.overrides_for(name)
            stats = self._stats.get(name)
            held = len(versions) > 1 or name in self._loads or (
                stats is not None and stats.claims > 0)
            for mv in versions:
                key = (mv.name, mv.version)
                admitted = self._admitted.get(key) is mv
                if admitted and mv.state.value != "LOADING":
                    self._admitted.pop(key, None)  # READY now (or its load failed)
                    admitted = False
                if mv.state.value != "READY" and key != self._in_load and not admitted:
                    continue  # not in memory (a load waiting for its turn takes nothing yet)
                busy = (mv.loaded is not None and mv.loaded.batcher.inflight > 0) or (
                    self._sequences is not None
                    and self._sequences.live_on(name, mv.version) > 0)
                out.append(Resident(
                    name, mv.version, self.memory_of(name, mv.version)[0], mv.last_used,
                    pinned=ov.pinned or self._pinned_by_pipeline(name, mv.version),
                    evictable=held_evictable or (mv.state.value == "READY" and not held
                                                 and (busy_evictable or not busy))))
        return out

    def used_bytes(self) -> int:
        return residency.used(self.residents())

    def check_deploy(self, name: str, version: int, needed: int | None = None,
                     swap_from: int | None = None) -> None:
        """Raise MemoryBudgetError when ``name`` ``version`` cannot be loaded within the budget
        even after unloading every idle, unpinned model (``swap_from``: the version it
        replaces, which stays loaded until the switch). Changes nothing."""
        if self.budget_bytes is None:
            return
        if needed is None:
            needed = self.memory_of(name, version)[0]
        residents = self.residents(held_evictable=True)  # only pinned ones stay for good
        old = next((r for r in residents if r.name == name and r.version == swap_from), None)
        residency.check_fits(needed, self.budget_bytes, residents, name=name,
                             version=version, swap_from=old)

    @contextlib.contextmanager
    def loading(self, mv: VersionSlot) -> Iterator[None]:
        """Around one load: make room within the budget first, then measure the load."""
        with self._load_lock:
            stats = self._stats_of(mv.name)
            if self.budget_bytes is not None:
                self._make_room(mv.name, mv.version)
            rss0, t0 = process_rss(), time.perf_counter()
            on_demand = mv.name in self._loads  # a request's load (else deploy, start, API)
            sampler = _PeakSampler(rss0)
            self._in_load = (mv.name, mv.version)
            try:
                yield
                self._admitted[(mv.name, mv.version)] = mv
            finally:
                self._in_load = None
                peak = sampler.stop()
            now = process_rss()
            peak = max(peak, now)  # one reading for both: what the load kept is within its peak
            rss = max(0, now - rss0)
            load_ms = (time.perf_counter() - t0) * 1000
            self.repository.lifecycle.record(mv.name, "load",
                                             "on-demand" if on_demand else "requested",
                                             load_ms / 1000)
            self._note(mv.name, mv.version, rss)
            if peak > rss0:  # the latest (the first load in a process also starts the runtime)
                self._figures.load_peak[(mv.name, mv.version)] = peak - rss0
            mv.last_used = time.monotonic()
            with self._lock:
                stats.loads += 1
                self._held.discard(mv.name)
                self._unfit.discard(mv.name)
            if self.repository.overrides_for(mv.name).idle_unload_s:
                self.start()  # a setting given after start-up (live settings) needs the sweeper
            # no snapshot here: the version is not READY yet (the repository's on_change
            # writes it once it is, and again when a switch and the old version's unload end)
            if self._on_loaded is not None:
                self._on_loaded(mv, load_ms, self._figures.measured.get((mv.name, mv.version)))

    def _make_room(self, name: str, version: int) -> None:
        """Unload least recently used versions until ``name`` ``version`` fits: idle ones
        first, then busy ones (drained). Versions held for a moment (loading, mid-swap,
        claimed by the requests their load was for) are waited for, up to the model's
        ``load_timeout_ms``; MemoryBudgetError only when it can never fit (its figure is
        larger than the budget less the pinned versions).

        Room is made for what the load takes at its peak, in the accounting first, then in
        the resident memory measured (the kernel's count): a load starts only when both
        allow it (a load whose peak alone exceeds the budget starts with nothing else
        unloadable left)."""
        assert self.budget_bytes is not None
        figure = self.memory_of(name, version)[0]
        manifest = self._manifest(name, version)
        # the smallest credible figure decides "never": a first load in a process also
        # measures the runtime's one-time start-up, which is not the model's
        floor = min(figure, manifest.load_cost_bytes) if (
            manifest is not None and manifest.load_cost_bytes > 0) else figure
        peak = max(figure, self._figures.load_peak.get((name, version), 0))
        keep = frozenset({name})  # a swap: the old version serves until the switch
        deadline = time.monotonic() + load_timeout_s(self.repository.overrides_for(name))

        def others(**kw: bool) -> list[Resident]:
            return [r for r in self.residents(**kw) if not (r.name == name
                                                             and r.version == version)]

        def fits(needed: int, **kw: bool) -> bool:
            try:
                residency.victims(needed, self.budget_bytes or 0, others(**kw), keep=keep)
            except MemoryBudgetError:
                return False
            return True

        try:
            residency.victims(floor, self.budget_bytes, others(held_evictable=True), keep=keep)
        except MemoryBudgetError as exc:
            self._did_not_fit(name)
            raise MemoryBudgetError(f"model {name!r} version {version}: {exc}") from None
        needed = peak if fits(peak, held_evictable=True) else floor
        while True:
            try:
                chosen = residency.victims(needed, self.budget_bytes, others(), keep=keep)
                break
            except MemoryBudgetError:
                pass
            try:
                chosen = residency.victims(needed, self.budget_bytes,
                                           others(busy_evictable=True), keep=keep)
                break
            except MemoryBudgetError as exc:
                error = exc
            if time.monotonic() > deadline:
                raise ModelUnavailableError(
                    f"model {name!r} version {version}: no room was freed for it within "
                    f"load_timeout_ms: {error} (versions held by a load or a swap)")
            time.sleep(0.02)  # a version is held for a moment: wait for it
        for r in chosen:
            self._unload(r.name, r.version, "evicted", self._room_reason(name, version))
        self._make_measured_room(name, version, needed, keep, deadline)

    def _room_reason(self, name: str, version: int) -> str:
        return (f"unloaded to make room for {name} version {version} "
                f"(memory budget {mib(self.budget_bytes or 0)})")

    def _make_measured_room(self, name: str, version: int, needed: int,
                            keep: frozenset[str], deadline: float) -> None:
        """Unload more (least recently used first) while the resident memory measured above
        the empty agent leaves less than ``needed`` free in the budget; a version held for a
        moment is waited for (up to ``deadline``)."""
        assert self.budget_bytes is not None
        return_freed_memory()
        while True:
            used = max(0, process_rss() - self.empty_rss)
            if used + needed <= self.budget_bytes:
                return

            def candidates(**kw: bool) -> list[Resident]:
                return sorted((r for r in self.residents(busy_evictable=True, **kw)
                               if r.evictable and not r.pinned and r.name not in keep
                               and not (r.name == name and r.version == version)),
                              key=lambda r: r.last_used)

            rest = candidates()
            if not rest:
                if candidates(held_evictable=True) and time.monotonic() < deadline:
                    time.sleep(0.02)  # held for a moment (a load's requests being routed)
                    continue
                log.info("%s version %s: loading with %s measured in use (budget %s, the "
                         "load takes up to %s): nothing else can be unloaded", name, version,
                         mib(used), mib(self.budget_bytes), mib(needed))
                return
            self._unload(rest[0].name, rest[0].version, "evicted",
                         self._room_reason(name, version) + " measured in resident memory")

    def _did_not_fit(self, name: str) -> None:
        with self._lock:
            self._reloadable.add(name)  # a later request tries again (room may have freed)
            self._unfit.add(name)

    def did_not_fit(self, name: str) -> bool:
        """Whether the last load of ``name`` was refused by the memory budget."""
        return name in self._unfit

    def _unload(self, name: str, version: int, reason: str, why: str) -> None:
        """Unload one version (its live sequences and in-flight requests are let finish
        first, within the drain timeout); the next request for the model loads it again."""
        log.info("%s version %s: %s", name, version, why)
        t0 = time.monotonic()
        if self._sequences is not None:
            self._sequences.drain(name, version, self._drain_timeout_s)
        left = max(0.0, self._drain_timeout_s - (time.monotonic() - t0))
        with self._lock:
            self._reloadable.add(name)
            stats = self._stats_of(name)
            stats.unloads += 1
            stats.last_unload = why
        with contextlib.suppress(ModelNotFoundError):
            self.repository.unload_version(name, version, drain_timeout_s=left, reason=reason)
        return_freed_memory()
        self.persist()  # the unload count (the repository's on_change wrote the unload)

    # ------------------------------------------------------------------ on demand
    def loads_on_request(self, name: str) -> bool:
        """Whether a request for ``name`` (not loaded) loads it."""
        if name in self._held:
            return False
        return (name in self._reloadable
                or self.repository.overrides_for(name).load == "on-demand")

    def managed(self) -> set[str]:
        """Models whose requests have waited for a load (on-demand or reloaded)."""
        with self._lock:
            return {name for name, stats in self._stats.items() if stats.waits}

    def hold(self, name: str) -> None:
        """An operator unloaded ``name``: requests do not load it until it is loaded again."""
        with self._lock:
            self._held.add(name)
            self._reloadable.discard(name)

    def acquire(self, name: str, version: int | None) -> VersionSlot | None:
        """Load ``name`` for a request (shared with concurrent requests) and wait for it up to
        the model's ``load_timeout_ms``; None when requests do not load this model.

        Unless it returns None, the caller holds a claim on the model (it is not unloaded to
        make room) until it calls :meth:`release` once it has routed the request."""
        if not self.loads_on_request(name):
            return None
        timeout = load_timeout_s(self.repository.overrides_for(name))
        with self._lock:
            stats = self._stats_of(name)
            future = self._loads.get(name)
            if future is None:
                future = self._loads[name] = Future()
                stats.loading = True
                threading.Thread(target=self._run_load, args=(name, future),
                                 name=f"edge-load-{name}", daemon=True).start()
            stats.waiting += 1
            stats.claims += 1
        start = time.monotonic_ns()
        try:
            self._wait_for(name, future, timeout)
            mv = future.result()
            if version is not None and mv.version != version:
                try:
                    mv = self.repository.resolve(name, version).slot
                except (ModelNotFoundError, ModelUnavailableError) as exc:
                    raise LoadRaced(str(exc)) from None
        except BaseException:
            self.release(name)  # no request will be routed on this claim
            raise
        finally:
            waited = time.monotonic_ns() - start
            with self._lock:
                stats.waiting -= 1
                stats.waits += 1
                stats.wait_ns += waited
                stats.last_wait_ns = waited
            self.persist()
        return mv

    def _wait_for(self, name: str, future: Future[VersionSlot], timeout: float) -> None:
        try:
            future.result(timeout)
        except FutureTimeoutError:
            raise ModelUnavailableError(
                f"model {name!r} is loading on demand and was not ready within "
                f"load_timeout_ms={timeout * 1000:.0f}; retry") from None
        except AgentError as exc:
            raise ModelUnavailableError(
                f"model {name!r} could not be loaded on demand: {exc}") from None

    def release(self, name: str) -> None:
        """The request that :meth:`acquire` loaded ``name`` for has been routed."""
        with self._lock:
            stats = self._stats_of(name)
            stats.claims = max(0, stats.claims - 1)

    def _run_load(self, name: str, future: Future[VersionSlot]) -> None:
        try:
            mv = self._loader(name)
            with self._lock:
                self._stats_of(name).on_demand_loads += 1
            future.set_result(mv)
        except BaseException as exc:  # handed to every waiting request
            log.warning("on-demand load of %s failed: %s", name, exc)
            future.set_exception(exc if isinstance(exc, AgentError)
                                 else ModelUnavailableError(str(exc)))
        finally:
            with self._lock:
                self._loads.pop(name, None)
                self._stats_of(name).loading = False

    def _load_latest(self, name: str) -> VersionSlot:
        """The default loader (no model manager): the highest version on disk."""
        versions = self.repository.scan().get(name)
        if not versions:
            raise ModelNotFoundError(f"model {name!r} is not in the repository")
        return self.repository.load_version(name, versions[-1])

    # ------------------------------------------------------------------ idle
    def sweep(self, now: float | None = None) -> list[tuple[str, int]]:
        """Unload the versions idle past their model's ``idle_unload_s``; returns them."""
        now = time.monotonic() if now is None else now
        residents = self.residents()
        idle_after = {r.name: self.repository.overrides_for(r.name).idle_unload_s or 0.0
                      for r in residents}
        done = []
        for r in residency.idle(residents, now, idle_after):
            self._unload(r.name, r.version, "idle", f"unloaded after {idle_after[r.name]:g} s idle")
            done.append((r.name, r.version))
        return done

    def _sweep_loop(self) -> None:
        while not self._stop.wait(_SWEEP_S):
            try:
                self.sweep()
                if self.budget_bytes is not None:
                    self.reconcile()
            except Exception:  # the sweeper must outlive one bad unload
                log.exception("idle unload failed")

    def reconcile(self) -> bool:
        """Compare the accounting (figures of the loaded versions) with the resident memory
        measured above the empty agent; a warning and a count (``divergences`` in
        ``residency.json``) when they are more than 10 % apart. True when they are."""
        with self._load_lock:  # not in the middle of a load: both figures are settled
            accounted = self.used_bytes()
            measured = max(0, process_rss() - self.empty_rss)
        self.measured_bytes = measured
        apart = abs(measured - accounted) > 0.10 * max(accounted, measured, 1)
        if apart and not self._diverged:
            self.divergences += 1
            log.warning("memory accounting %s, resident memory measured above the empty agent "
                        "%s (memory budget %s): more than 10 %% apart", mib(accounted),
                        mib(measured), mib(self.budget_bytes or 0))
            self.persist()
        self._diverged = apart
        return apart

    # ------------------------------------------------------------------ reports
    def _stats_of(self, name: str) -> ResidencyStats:
        stats = self._stats.get(name)
        if stats is None:
            stats = self._stats[name] = ResidencyStats()
        return stats

    def stats(self, name: str) -> ResidencyStats:
        """A copy of ``name``'s residency statistics."""
        with self._lock:
            return self._stats_of(name).copy()

    def snapshot(self) -> dict[str, object]:
        """The budget and each model's residency as plain data (what ``residency.json`` holds)."""
        names = sorted(set(self.repository.scan()) | set(self._stats))
        models = []
        for name in names:
            stats = self.stats(name)
            loaded = [mv.version for mv in self.repository.versions(name)
                      if mv.state.value == "READY"]
            serving = self.repository.default_version(name)
            version = serving if serving is not None else (loaded[-1] if loaded else None)
            figure = sum(self.memory_of(name, v)[0] for v in loaded)
            models.append({
                "model": name, "loaded_version": version, "serving_version": serving,
                "loaded_versions": loaded, "memory_bytes": figure,
                "state": "loaded" if loaded else self.not_loaded_reason(name)[1],
                "loads": stats.loads, "unloads": stats.unloads, "waits": stats.waits,
                "wait_ms": stats.wait_ns / 1e6, "last_wait_ms": stats.last_wait_ns / 1e6})
        return {"budget_bytes": self.budget_bytes, "used_bytes": self.used_bytes(),
                "measured_bytes": self.measured_bytes, "divergences": self.divergences,
                "at": time.time(), "models": models}

    def persist(self) -> None:
        """Best effort: the snapshot to ``STATE_DIR/residency.json`` (atomic replace; taken and
        written under one lock, so a later change is never overwritten by an earlier one)."""
        target = self.repository.state_dir / SNAPSHOT_NAME
        if not self.repository.state_dir.is_dir():
            return
        tmp = target.with_suffix(f".{threading.get_ident()}.tmp")
        with self._persist_lock:
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # private
                with os.fdopen(fd, "w") as out:
                    out.write(json.dumps(self.snapshot()))
                os.replace(tmp, target)
            except (OSError, AgentError) as exc:
                log.debug("residency snapshot not written: %s", exc)
                with contextlib.suppress(OSError):
                    tmp.unlink()

    def not_loaded_reason(self, name: str) -> tuple[str, str]:
        """(state, reason) for a model with no version in memory, in Triton's terms."""
        with self._lock:
            stats = self._stats.get(name)
            if stats is not None and stats.loading:
                return "LOADING", f"loading on demand ({stats.waiting} request(s) waiting)"
            if name in self._held:
                return "UNAVAILABLE", "not loaded"
            if stats is not None and stats.last_unload and name in self._reloadable:
                return "UNAVAILABLE", stats.last_unload + "; the next request loads it"
        if self.repository.overrides_for(name).load == "on-demand":
            return "UNAVAILABLE", "not loaded (load = on-demand: the first request loads it)"
        return "UNAVAILABLE", "not loaded"
