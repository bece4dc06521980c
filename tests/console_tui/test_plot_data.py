"""Plot data: stored history first, live seconds after it (none counted twice), idle seconds
are zeros, a range switch starts over, and old buckets fall out of the range."""

from __future__ import annotations

from console.plot_data import RANGES, PlotData, sparkline
from edge_agent.client.types import MetricPoint, MetricsSample, SystemPoint

T0 = 1_800_000_000  # a multiple of every range's step


def _point(ts: int, requests: int, step_s: int = 1, errors: int = 0) -> MetricPoint:
    return MetricPoint(ts=ts, step_s=step_s, model="mlp", version=None, requests=requests,
                       errors=errors, requests_per_s=requests / step_s,
                       error_rate=errors / max(requests, 1), mean_batch=2.0, p50_ms=1.0,
                       p95_ms=2.0, p99_ms=3.0, queue_p99_ms=0.5)


def _sample(ts: int, rps: float | None, system: dict[str, float] | None = None) -> MetricsSample:
    points = () if rps is None else (_point(ts, int(rps)),)
    return MetricsSample(ts=ts, points=points, system=system)


def test_live_seconds_wait_for_the_history_and_none_is_counted_twice() -> None:
    data = PlotData(RANGES[0])  # 5 min in 2 s buckets
    data.add_sample(_sample(T0 + 10, 50.0))  # before the history answered: held back
    data.add_sample(_sample(T0 + 12, 70.0))
    assert data.model_names() == []
    data.add_history({"mlp": [_point(T0, 20, step_s=2), _point(T0 + 10, 100, step_s=2)]},
                     until=T0 + 11)  # the query already holds second T0+10
    series = dict(data.model_series("mlp")["rps"])
    assert series[T0] == 10.0  # 20 requests over the 2 s step
    assert series[T0 + 10] == 50.0  # the stored bucket; the live T0+10 was skipped
    assert series[T0 + 12] == 70.0  # a live second after the query


def test_idle_seconds_are_zeros_and_device_load_is_plotted() -> None:
    data = PlotData(RANGES[0])
    data.add_history({}, until=0.0)
    data.add_sample(_sample(T0, 40.0, {"cpu_percent": 30.0, "mem_percent": 50.0,
                                       "temp_c": 60.0}))
    data.add_sample(_sample(T0 + 2, None, {"cpu_percent": 10.0, "mem_percent": 50.0}))
    rps = data.model_series("mlp")["rps"]
    assert rps == [(T0, 40.0), (T0 + 2, 0.0)]
    assert [ts for ts, _ in data.model_series("mlp")["p95"]] == [T0]  # no latency when idle
    device = data.device_series()
    assert device["cpu"] == [(T0, 30.0), (T0 + 2, 10.0)] and device["temp"] == [(T0, 60.0)]


def test_device_plots_start_from_the_stored_samples() -> None:
    data = PlotData(RANGES[1])  # 1 h in 15 s buckets
    stored = [SystemPoint(ts=T0, step_s=15, cpu_percent=20.0, mem_percent=40.0, rss_bytes=1,
                          temp_c=None, disk_free_bytes=1),
              SystemPoint(ts=T0 + 15, step_s=15, cpu_percent=60.0, mem_percent=42.0,
                          rss_bytes=1, temp_c=55.0, disk_free_bytes=1)]
    data.add_history({}, until=T0 + 20, system=stored)
    # a live second in the second bucket weighs one second against the stored 15
    data.add_sample(_sample(T0 + 21, None, {"cpu_percent": 76.0, "mem_percent": 42.0}))
    device = data.device_series()
    assert device["cpu"] == [(T0, 20.0), (T0 + 15, 61.0)]
    assert device["temp"] == [(T0 + 15, 55.0)]


def test_old_buckets_leave_the_range_and_a_switch_starts_over() -> None:
    data = PlotData(RANGES[0])
    data.add_history({"mlp": [_point(T0, 10, step_s=2)]}, until=T0 + 1)
    data.add_sample(_sample(T0 + 400, 5.0))  # more than 5 min later
    assert [ts for ts, _ in data.model_series("mlp")["rps"]] == [T0 + 400]
    data.reset(RANGES[1])
    assert data.range.label == "1 h" and not data.history_loaded and not data.model_names()


def test_sparkline_scales_to_its_maximum() -> None:
    assert sparkline([0, 5, 10]) == "▁▅█"
    assert sparkline([0, 0]) == "▁▁" and sparkline([]) == ""
