"""The Prometheus families Triton users expect (issue 28): pending requests, latency
summaries with quantiles, load/unload counts and durations, memory per loaded version and the
response cache hit ratio, scraped from a real agent and parsed with prometheus_client."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import numpy as np
import tritonclient.http as th
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from edge_agent.frontends.http.prometheus import QUANTILES
from tests.agent_http.conftest import HttpAgent
from tests.agent_http.test_metrics import scrape
from tests.support.eventually import eventually

SUMMARIES = ("nv_inference_request_summary_us", "nv_inference_queue_summary_us",
             "nv_inference_compute_infer_summary_us")


def samples(agent: HttpAgent) -> dict[str, list[Sample]]:
    """Every sample of a scrape, by sample name, through prometheus_client's parser."""
    text, _ = scrape(agent)
    out: dict[str, list[Sample]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append(s)
    return out


def value(found: dict[str, list[Sample]], name: str, **labels: str) -> float:
    matches = [s.value for s in found.get(name, [])
               if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(matches) == 1, (name, labels, found.get(name))
    return matches[0]


def _traffic(client_url: str, n: int, seed: int) -> None:
    client = th.InferenceServerClient(client_url)
    rng = np.random.default_rng(seed)
    try:
        for _ in range(n):
            inp = th.InferInput("input", [1, 64], "FP32")
            inp.set_data_from_numpy(rng.random((1, 64), dtype=np.float32))
            client.infer("mlp", [inp], model_version="1")
    finally:
        client.close()


def test_pending_summaries_memory_and_cache_ratio_after_traffic(http_agent: HttpAgent) -> None:
    # 4 callers: the test agent serves 8 HTTP connections and other fixtures hold some
    threads = [threading.Thread(target=_traffic, args=(http_agent.http, 50, i))
               for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    mlp1 = {"model": "mlp", "version": "1"}

    def settled() -> dict[str, list[Sample]]:
        # the answers were sent; each request's accounting follows its answer
        found = samples(http_agent)
        done = value(found, "nv_inference_pending_request_count", **mlp1) == 0 and all(
            value(found, name + "_count", **mlp1) >= 200 for name in SUMMARIES)
        return found if done else {}

    found = eventually(settled, timeout=60, interval=0.2,
                       message="pending requests of mlp v1 never returned to 0, or the 200 "
                               "requests were never all counted")
    for name in SUMMARIES:
        assert value(found, name + "_count", **mlp1) >= 200
        assert value(found, name + "_sum", **mlp1) > 0
        quantiles = [value(found, name, quantile=str(q), **mlp1) for q in QUANTILES]
        assert quantiles == sorted(quantiles), (name, quantiles)
        assert quantiles[0] >= 0 and quantiles[-1] > 0
    # a request lasts at least as long as it queued and as its model ran
    p99 = {n: value(found, n, quantile="0.99", **mlp1) for n in SUMMARIES}
    assert p99["nv_inference_request_summary_us"] >= p99["nv_inference_compute_infer_summary_us"]
    memory = [s for s in found["edge_model_memory_bytes"] if s.labels["model"] == "mlp"]
    assert memory and all(s.value > 0 for s in memory)
    assert {s.labels["source"] for s in memory} <= {"device", "build", "artifact"}
    ratio = value(found, "edge_cache_hit_ratio", **mlp1)  # random inputs: nearly all misses
    hits = value(found, "nv_cache_num_hits_per_model", **mlp1)
    misses = value(found, "nv_cache_num_misses_per_model", **mlp1)
    assert misses >= 200 and ratio == hits / (hits + misses)
    # the start-up loads were counted, with their durations
    assert value(found, "edge_model_loads_total", model="mlp", reason="requested") >= 2
    assert value(found, "edge_model_load_duration_seconds_sum", model="mlp",
                 reason="requested") > 0


def test_load_and_unload_counts_follow_the_repository_api(http_agent: HttpAgent,
                                                          triton_http) -> None:
    def loads(found: dict[str, list[Sample]], event: str) -> float:
        return sum(s.value for s in found.get(f"edge_model_{event}s_total", [])
                   if s.labels["model"] == "squeezenet_ov")

    before = samples(http_agent)
    triton_http.unload_model("squeezenet_ov")
    eventually(lambda: not triton_http.is_model_ready("squeezenet_ov"), timeout=60,
               message="squeezenet_ov did not unload")
    triton_http.load_model("squeezenet_ov")
    after = samples(http_agent)
    assert loads(after, "load") == loads(before, "load") + 1
    assert loads(after, "unload") == loads(before, "unload") + 1
    assert value(after, "edge_model_unloads_total", model="squeezenet_ov",
                 reason="requested") >= 1
    assert value(after, "edge_model_unload_duration_seconds_count", model="squeezenet_ov",
                 reason="requested") >= 1


OPTIONAL = {"edge_device_temperature_celsius"}  # only where the device reports one


def test_every_dashboard_metric_exists_in_a_real_scrape(http_agent: HttpAgent) -> None:
    _traffic(http_agent.http, 3, 99)
    dashboard = json.loads((Path(__file__).resolve().parents[2] / "docs"
                            / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    queried = {m for e in exprs for m in re.findall(r"\b((?:nv|edge)_[a-z0-9_]+)\{", e)}
    assert {"nv_inference_pending_request_count", "nv_inference_queue_summary_us",
            "nv_inference_compute_infer_summary_us", "edge_model_memory_bytes",
            "edge_cache_hit_ratio", "edge_model_loads_total", "edge_model_unloads_total",
            "edge_model_load_duration_seconds_sum"} <= queried
    wanted = queried - OPTIONAL

    def missing() -> set[str]:  # the device gauges appear once the recorder sampled
        return wanted - set(samples(http_agent))

    eventually(lambda: not missing(), timeout=60, interval=0.5,
               message=lambda: f"dashboard metrics absent from a scrape: {sorted(missing())}")
