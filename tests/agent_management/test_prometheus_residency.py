"""Issue 28's Prometheus families over a real deploy and swap (the serving core with its
model manager, real ONNX Runtime): load and unload counts, pending requests under a burst."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from pathlib import Path

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from edge_agent.core.types import InferRequest, InferResult
from edge_agent.frontends.http.prometheus import AgentCollector, MetricsPage
from tests.support.bundles import Bundles
from tests.support.eventually import eventually
from tests.support.harness import managed_agent


def _samples(page: MetricsPage) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(page.render().decode())
            for s in family.samples}


def _labels(**kw: str) -> frozenset[tuple[str, str]]:
    return frozenset(kw.items())


def test_load_count_is_one_after_a_deploy_and_two_after_a_swap(bundles: Bundles,
                                                                 tmp_path: Path) -> None:
    with managed_agent(tmp_path / "state", bundles.public_key) as agent:
        page = MetricsPage(AgentCollector(agent.dataplane))
        try:
            assert agent.manager.deploy(bundles.mlp[1]).ok
            first = _samples(page)
            assert first[("edge_model_loads_total", _labels(model="mlp", reason="requested"))] == 1
            took = first[("edge_model_load_duration_seconds_sum",
                          _labels(model="mlp", reason="requested"))]
            assert took > 0
            assert not any(name == "edge_model_unloads_total" for name, _ in first)
            memory = [v for (name, labels), v in first.items()
                      if name == "edge_model_memory_bytes"
                      and {("model", "mlp"), ("version", "1")} <= labels]
            assert len(memory) == 1 and memory[0] > 0

            assert agent.manager.deploy(bundles.mlp[2]).ok  # the swap: v2 loads, v1 unloads
            second = _samples(page)
            assert second[("edge_model_loads_total",
                           _labels(model="mlp", reason="requested"))] == 2
            assert second[("edge_model_unloads_total",
                           _labels(model="mlp", reason="requested"))] == 1
            assert second[("edge_model_load_duration_seconds_sum",
                           _labels(model="mlp", reason="requested"))] > took

            # requests arriving while an execution runs queue behind it: pending rises
            # (read while a thread keeps submitting), then returns to 0 once all are answered
            x = np.random.default_rng(5).standard_normal((1, 64)).astype(np.float32)
            pending = _labels(model="mlp", version="2")
            stop = threading.Event()
            futures: list[Future[InferResult]] = []

            def submit() -> None:  # one request of several callers runs on its own thread
                mine: list[Future[InferResult]] = []
                while not stop.is_set():
                    mine.append(agent.dataplane.submit(InferRequest("mlp", {"input": x})))
                    if len(mine) >= 64:
                        mine.pop(0).result(60)
                futures.extend(mine)

            threads = [threading.Thread(target=submit, name=f"burst-{i}") for i in range(4)]
            for thread in threads:
                thread.start()
            try:
                eventually(lambda: _samples(page)[("nv_inference_pending_request_count",
                                                   pending)] > 0,
                           timeout=120, interval=0.005,
                           message="no scrape ever saw a request pending during a burst")
            finally:
                stop.set()
                for thread in threads:
                    thread.join(60)
            assert not any(thread.is_alive() for thread in threads)
            for f in futures:
                f.result(60)
            assert _samples(page)[("nv_inference_pending_request_count", pending)] == 0
        finally:
            page.close()
