"""``/metrics``: a ``prometheus_client`` collector read at scrape time.

Little is counted for Prometheus on the inference path (the batcher's ring of recent
latencies, core/tallies.py, for the summaries' quantiles): each scrape reads what the agent
already keeps (the batchers' Triton statistics, the response cache's counts, the model
manager's versions, the state store's deployment history, the metrics recorder's last system
sample) and writes it in the Prometheus text format. Names follow Triton where one exists
(``nv_inference_*`` and ``nv_cache_*``, labelled ``model`` and ``version``); the agent's own
are ``edge_*``. See docs/prometheus.md for the list.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Protocol

from prometheus_client.core import GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from edge_agent import __version__
from edge_agent.core.api import DataPlaneAPI
from edge_agent.core.tallies import LifecycleTotal, quantile
from edge_agent.core.types import ModelStats
from edge_agent.metrics.recorder import LiveSample, MetricsRecorder
from edge_agent.metrics.system import SystemSample

CONTENT_TYPE = CONTENT_TYPE_LATEST
_LABELS = ("model", "version")


class VersionLike(Protocol):
    """What the collector reads of the manager's version list."""

    @property
    def model(self) -> str: ...

    @property
    def version(self) -> int: ...

    @property
    def active(self) -> bool: ...

    @property
    def state(self) -> str: ...


class DeploymentHistory(Protocol):
    """What the collector reads of the state store."""

    def deployment_totals(self) -> list[tuple[str, str, str, int, float]]: ...

    def last_switches(self) -> dict[str, float]: ...


_TRITON_COUNTERS: tuple[tuple[str, str, Callable[[ModelStats], float]], ...] = (
    ("nv_inference_request_success", "Number of successful inference requests (response "
     "cache hits included)", lambda s: s.success.count + s.cache_hit.count),
    ("nv_inference_count", "Number of inferences performed (a batch of N counts N; response "
     "cache hits not included)", lambda s: s.inference_count),
    ("nv_inference_exec_count", "Number of model executions performed",
     lambda s: s.execution_count),
    ("nv_inference_request_duration_us", "Cumulative inference request duration in "
     "microseconds (cache hits included)",
     lambda s: (s.success.ns + s.fail.ns + s.cache_hit.ns) / 1000),
    ("nv_inference_queue_duration_us", "Cumulative inference queuing duration in microseconds",
     lambda s: s.queue.ns / 1000),
    ("nv_inference_compute_input_duration_us", "Cumulative compute input duration in "
     "microseconds", lambda s: s.compute_input.ns / 1000),
    ("nv_inference_compute_infer_duration_us", "Cumulative compute inference duration in "
     "microseconds", lambda s: s.compute_infer.ns / 1000),
    ("nv_inference_compute_output_duration_us", "Cumulative compute output duration in "
     "microseconds", lambda s: s.compute_output.ns / 1000),
)
_CACHE_COUNTERS: tuple[tuple[str, str, Callable[[ModelStats], float]], ...] = (
    ("nv_cache_num_hits_per_model", "Number of response cache hits per model",
     lambda s: s.cache_hit.count),
    ("nv_cache_num_misses_per_model", "Number of response cache misses per model",
     lambda s: s.cache_miss.count),
    ("nv_cache_hit_duration_per_model", "Total response cache hit duration per model, in "
     "microseconds", lambda s: s.cache_hit.ns / 1000),
    ("nv_cache_miss_duration_per_model", "Total response cache miss duration per model, in "
     "microseconds", lambda s: s.cache_miss.ns / 1000),
)


QUANTILES = (0.5, 0.9, 0.95, 0.99)
"""Quantiles of the latency summaries (Triton's defaults), over each version's last requests."""
_SUMMARIES: tuple[tuple[str, str, Callable[[ModelStats], tuple[tuple[int, ...], int, int]]],
                  ...] = (
    ("nv_inference_request_summary_us", "Summary of successful inference request durations "
     "in microseconds (quantiles over the last requests; cache hits not included)",
     lambda s: (s.recent_request_ns, s.success.count, s.success.ns)),
    ("nv_inference_queue_summary_us", "Summary of inference queuing durations in "
     "microseconds (quantiles over the last requests)",
     lambda s: (s.recent_queue_ns, s.queue.count, s.queue.ns)),
    ("nv_inference_compute_infer_summary_us", "Summary of compute inference durations in "
     "microseconds (quantiles over the last requests)",
     lambda s: (s.recent_compute_infer_ns, s.compute_infer.count, s.compute_infer.ns)),
)


def _counter(name: str, doc: str) -> Metric:
    # Triton's counter samples have no _total suffix: a plain Metric whose samples keep the
    # names given (prometheus_client still names the family NAME_total in # TYPE lines)
    return Metric(name, doc, "counter")


FAILURE = "nv_inference_request_failure"
_FAILURE_REASONS: tuple[tuple[str, Callable[[ModelStats], int]], ...] = (
    ("REJECTED", lambda s: s.rejected.count),
    ("CANCELED", lambda s: s.cancel.count),
    ("BACKEND", lambda s: s.fail.count - s.rejected.count - s.cancel.count),
)
"""Triton's ``reason`` label values: refused or timed out before running (invalid input, full
queue, queue timeout); the caller left before it ran (cancelled, past its gRPC deadline,
connection closed); failed while running."""


def _failures(stats: Iterable[ModelStats]) -> Metric:
    """``nv_inference_request_failure`` by ``reason``, as Triton reports it."""
    metric = _counter(FAILURE, "Number of failed inference requests, by reason")
    for s in stats:
        for reason, read in _FAILURE_REASONS:
            metric.add_sample(FAILURE, {"model": s.name, "reason": reason,
                                        "version": str(s.version)}, read(s))
    return metric


class AgentCollector(Collector):
    """Reads the agent's state at each scrape (see the module docstring).

    ``versions`` lists the model manager's versions; ``history`` is the state store;
    ``recorder`` feeds the last system sample (kept by a once-a-second subscription);
    ``cache`` says whether the response cache is on (then the ``nv_cache_*`` metrics appear).
    Every source is optional: what is missing is left out.
    """

    def __init__(self, dataplane: DataPlaneAPI, *,
                 versions: Callable[[], Sequence[VersionLike]] | None = None,
                 history: DeploymentHistory | None = None,
                 recorder: MetricsRecorder | None = None, cache: bool = False) -> None:
        self._dp = dataplane
        self._versions = versions
        self._history = history
        self._cache = cache
        self._system: SystemSample | None = None
        self._unsubscribe = recorder.subscribe(self._keep) if recorder is not None else None

    def _keep(self, sample: LiveSample) -> None:
        if sample.system is not None:
            self._system = sample.system

    def close(self) -> None:
        """Stop following the recorder."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    def collect(self) -> Iterator[Metric]:
        stats = self._dp.statistics()
        yield _failures(stats)
        yield from self._triton(stats, _TRITON_COUNTERS)
        yield from _per_version(stats, self._cache)
        if self._cache:
            yield from self._triton(stats, _CACHE_COUNTERS)
        yield from _lifecycle(self._dp.lifecycle())
        info = GaugeMetricFamily("edge_agent_info", "The agent's version", labels=["version"])
        info.add_metric([__version__], 1)
        yield info
        yield from _sequences(self._dp.sequence_slots())
        if self._versions is not None:
            yield from self._models(self._versions())
        if self._history is not None:
            yield from self._deployments(self._history)
        if self._system is not None:
            yield from _system(self._system)

    @staticmethod
    def _triton(stats: Iterable[ModelStats],
                table: tuple[tuple[str, str, Callable[[ModelStats], float]], ...]
                ) -> Iterator[Metric]:
        for name, doc, read in table:
            metric = _counter(name, doc)
            for s in stats:
                metric.add_sample(name, {"model": s.name, "version": str(s.version)}, read(s))
            yield metric

    @staticmethod
    def _models(versions: Sequence[VersionLike]) -> Iterator[Metric]:
        active = GaugeMetricFamily("edge_model_active_version",
                                   "The version each model serves by default", labels=["model"])
        ready = GaugeMetricFamily("edge_model_version_ready",
                                  "1 when the model version is loaded and ready, else 0",
                                  labels=list(_LABELS))
        for v in versions:
            if v.active:
                active.add_metric([v.model], v.version)
            ready.add_metric([v.model, str(v.version)], 1 if v.state == "READY" else 0)
        yield active
        yield ready

    @staticmethod
    def _deployments(history: DeploymentHistory) -> Iterator[Metric]:
        labels = ["model", "kind", "status"]
        count = _counter("edge_deployments",
                         "Finished deployments (deploy, activate, rollback, auto-rollback, "
                         "remove) by outcome")
        took = SummaryMetricFamily("edge_deployment_duration_seconds",
                                   "Time finished deployments took, from upload received to "
                                   "commit or failure", labels=labels)
        for model, kind, status, n, seconds in history.deployment_totals():
            values = {"model": model, "kind": kind, "status": status}
            count.add_sample("edge_deployments_total", values, n)
            took.add_metric([model, kind, status], n, seconds)
        yield count
        yield took
        switch = GaugeMetricFamily("edge_last_swap_duration_seconds",
                                   "How long the newest committed change of the model's "
                                   "active version took (load, probe, switch, drain)",
                                   labels=["model"])
        for model, seconds in sorted(history.last_switches().items()):
            switch.add_metric([model], seconds)
        yield switch


def _per_version(stats: Sequence[ModelStats], cache: bool) -> Iterator[Metric]:
    """Pending requests, latency summaries, memory figures and (``cache``) hit ratios."""
    pending = GaugeMetricFamily("nv_inference_pending_request_count", "Instantaneous number "
                                "of pending requests awaiting execution per-model",
                                labels=list(_LABELS))
    memory = GaugeMetricFamily("edge_model_memory_bytes", "Memory the loaded version takes: "
                               "the largest resident-memory growth its loads measured "
                               "(source device), else edge-pack's figure (build) or the "
                               "artifact size (artifact)", labels=[*_LABELS, "source"])
    ratio = GaugeMetricFamily("edge_cache_hit_ratio", "Response cache hits / lookups since "
                              "the version was loaded", labels=list(_LABELS))
    for s in stats:
        values = [s.name, str(s.version)]
        pending.add_metric(values, s.pending_count)
        if s.memory_bytes > 0:
            memory.add_metric([*values, s.memory_source], s.memory_bytes)
        lookups = s.cache_hit.count + s.cache_miss.count
        if lookups:
            ratio.add_metric(values, s.cache_hit.count / lookups)
    yield pending
    yield memory
    if cache:
        yield ratio
    for name, doc, read in _SUMMARIES:
        metric = Metric(name, doc, "summary")
        for s in stats:
            recent, count, total_ns = read(s)
            labels = {"model": s.name, "version": str(s.version)}
            ordered = sorted(recent)
            for q in QUANTILES if ordered else ():
                metric.add_sample(name, {**labels, "quantile": str(q)},
                                  quantile(ordered, q) / 1000)
            metric.add_sample(name + "_count", labels, count)
            metric.add_sample(name + "_sum", labels, total_ns / 1000)
        yield metric


def _lifecycle(totals: Sequence[LifecycleTotal]) -> Iterator[Metric]:
    """Load and unload counts and durations per model and reason."""
    for event in ("load", "unload"):
        count = _counter(f"edge_model_{event}s", f"Model version {event}s by reason "
                         "(load: requested, on-demand; unload: requested, evicted, idle)")
        took = SummaryMetricFamily(f"edge_model_{event}_duration_seconds",
                                   f"Time model version {event}s took", labels=["model",
                                                                               "reason"])
        for t in totals:
            if t.event == event:
                count.add_sample(f"edge_model_{event}s_total",
                                 {"model": t.model, "reason": t.reason}, t.count)
                took.add_metric([t.model, t.reason], t.count, t.seconds)
        yield count
        yield took


def _sequences(slots: dict[str, tuple[int, int]]) -> Iterator[Metric]:
    active = GaugeMetricFamily("edge_sequences_active", "Live sequences of a stateful model "
                               "(slots held)", labels=["model"])
    total = GaugeMetricFamily("edge_sequence_slots", "Sequence slots of a stateful model "
                              "(max_candidate_sequences)", labels=["model"])
    for model, (held, count) in sorted(slots.items()):
        active.add_metric([model], held)
        total.add_metric([model], count)
    yield active
    yield total


def _system(sample: SystemSample) -> Iterator[Metric]:
    def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, doc, value=value)

    yield gauge("edge_device_cpu_percent", "Device CPU use, percent of all cores",
                sample.cpu_percent)
    yield gauge("edge_device_memory_percent", "Device memory in use, percent",
                sample.mem_percent)
    yield gauge("edge_agent_rss_bytes", "Resident memory of the agent and its runtime "
                "processes", sample.rss_bytes)
    if sample.temp_c is not None:
        yield gauge("edge_device_temperature_celsius", "CPU or SoC temperature",
                    sample.temp_c)
    if sample.disk_free_bytes >= 0:
        yield gauge("edge_disk_free_bytes", "Free bytes on the state directory's file system",
                    sample.disk_free_bytes)
    yield gauge("edge_system_sample_age_seconds", "Seconds since the system sample was taken",
                max(0.0, time.time() - sample.ts))


class MetricsPage:
    """A registry holding one :class:`AgentCollector`; :meth:`render` is a scrape."""

    def __init__(self, collector: AgentCollector) -> None:
        self.collector = collector
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(collector)

    def render(self) -> bytes:
        """The text exposition of every metric now."""
        return generate_latest(self._registry)

    def close(self) -> None:
        """Unregister and stop the collector's subscription."""
        self._registry.unregister(self.collector)
        self.collector.close()
