"""Issue 28: the numbers the console shows are the agent's, not an artefact of how they are
cut. The fleet REQ/S of a steady rate stays that rate through a bucket; plots from stored
history show an idle stretch as zeros (rates) or a gap (latency), never a line across it."""

from __future__ import annotations

from console.connections import TRAFFIC_BUCKETS, TRAFFIC_STEP_S, traffic_rates, traffic_window
from console.plot_data import RANGES, PlotData, segments
from edge_agent.client.types import MetricPoint

T0 = 1_800_000_000  # a multiple of every step


def _point(ts: int, requests: int, step_s: int, errors: int = 0) -> MetricPoint:
    return MetricPoint(ts=ts, step_s=step_s, model="mlp", version=None, requests=requests,
                       errors=errors, requests_per_s=requests / step_s,
                       error_rate=errors / max(requests, 1), mean_batch=1.0, p50_ms=1.0,
                       p95_ms=2.0, p99_ms=3.0, queue_p99_ms=0.5)


def _steady(rate: int, end: int) -> list[MetricPoint]:
    """What the agent answers for ``rate`` requests every second up to ``end`` (30 s buckets,
    the newest holding only its whole seconds so far)."""
    out = []
    for start in range(end - end % TRAFFIC_STEP_S - 12 * TRAFFIC_STEP_S, end, TRAFFIC_STEP_S):
        seconds = min(TRAFFIC_STEP_S, end - start)
        out.append(_point(start, rate * seconds, TRAFFIC_STEP_S, errors=seconds))
    return out


def test_fleet_rate_of_a_steady_load_is_that_rate_at_every_second_of_a_bucket() -> None:
    for into in range(TRAFFIC_STEP_S):  # was 36 * into / 30: 1.2 ... 34.8, then reset
        end = T0 + into
        rates, errors = traffic_rates(_steady(36, end), end)
        assert len(rates) == TRAFFIC_BUCKETS
        assert rates == (36.0,) * TRAFFIC_BUCKETS, (into, rates)
        assert errors == (1.0,) * TRAFFIC_BUCKETS, (into, errors)


def test_a_bucket_just_begun_is_left_out_not_divided_by_the_whole_step() -> None:
    first, covered = traffic_window(T0 + 2)
    assert covered == TRAFFIC_STEP_S  # ends with the last complete bucket
    assert first == T0 - TRAFFIC_BUCKETS * TRAFFIC_STEP_S
    first, covered = traffic_window(T0 + 12)
    assert (first, covered) == (T0 - (TRAFFIC_BUCKETS - 1) * TRAFFIC_STEP_S, 12)
    rates, _ = traffic_rates([_point(T0, 0, TRAFFIC_STEP_S)], T0 + 12)
    assert rates[-1] == 0.0  # traffic that stopped shows zero at once


def test_stored_history_shows_an_idle_stretch_as_zeros_not_a_slope() -> None:
    data = PlotData(RANGES[0])  # 5 min in 2 s steps
    busy = [_point(T0 + t, 200, 2) for t in range(0, 60, 2)]  # 100 req/s, then stopped at once
    late = [_point(T0 + 150, 200, 2)]  # traffic again 90 s later
    data.add_history({"mlp": busy + late}, until=T0 + 152)
    series = data.model_series("mlp")
    rps = dict(series["rps"])
    assert rps[T0 + 58] == 100.0
    assert rps[T0 + 60] == 0.0 and rps[T0 + 100] == 0.0 and rps[T0 + 148] == 0.0
    assert rps[T0 + 150] == 100.0
    steps = [ts for ts, _ in series["rps"]]
    assert steps == list(range(T0, T0 + 152, 2))  # every step has a value: nothing to join
    # latency exists only where there were requests: two runs, drawn apart
    runs = segments(series["p95"], data.gap_s)
    assert [(r[0][0], r[-1][0]) for r in runs] == [(T0, T0 + 58), (T0 + 150, T0 + 150)]


def test_minute_rollups_in_a_shorter_step_are_neither_gaps_nor_inflated() -> None:
    data = PlotData(RANGES[1])  # 1 h in 15 s steps; history older than the rollup is minutes
    data.add_history({"mlp": [_point(T0 + 60 * i, 600, 60) for i in range(5)]},
                     until=T0 + 300)
    series = data.model_series("mlp")
    assert [v for _, v in series["rps"]] == [10.0] * 5  # 600 over 60 s, not over 15 s
    assert len(segments(series["p95"], data.gap_s)) == 1  # one run, not five dots
