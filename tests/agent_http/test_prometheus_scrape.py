"""A real Prometheus server (Debian's package) scrapes the agent's /metrics every second and
answers a query for one of its counters through its HTTP API."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as th

from tests.agent_http.conftest import HttpAgent
from tests.agent_http.test_metrics import _mv, scrape
from tests.support.eventually import eventually

PROMETHEUS = shutil.which("prometheus")
pytestmark = pytest.mark.skipif(
    PROMETHEUS is None, reason="needs the prometheus server (Debian package 'prometheus'; "
                               "scripts/system-deps.sh installs it)")

CONFIG = """
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: edge-agent
    metrics_path: /metrics
    static_configs:
      - targets: ["{target}"]
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read()
    except OSError:
        return 0, b""


@pytest.fixture
def prometheus(http_agent: HttpAgent, tmp_path: Path) -> Iterator[str]:
    """Prometheus on 127.0.0.1 (temp config and storage) scraping the agent; its base URL."""
    config = tmp_path / "prometheus.yml"
    config.write_text(CONFIG.format(target=http_agent.http))
    for _attempt in range(5):  # the port is picked free, but another process may take it
        port = _free_port()
        log = (tmp_path / f"prometheus-{port}.log").open("wb")
        proc = subprocess.Popen(
            [str(PROMETHEUS), f"--config.file={config}",
             f"--storage.tsdb.path={tmp_path / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 90
        while proc.poll() is None and time.monotonic() < deadline:
            if _get(f"{base}/-/ready")[0] == 200:
                break
            time.sleep(0.2)
        if proc.poll() is None and _get(f"{base}/-/ready")[0] == 200:
            break
        proc.kill()
        proc.wait(30)
        log.close()
    else:
        pytest.fail("prometheus did not start: "
                    + (tmp_path / f"prometheus-{port}.log").read_text()[-2000:])
    try:
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)
        log.close()


def _query(base: str, expr: str) -> list[dict]:
    status, body = _get(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    if status != 200:
        return []
    doc = json.loads(body)
    assert doc["status"] == "success", doc
    return doc["data"]["result"]


def test_prometheus_scrapes_the_agent_and_answers_a_counter(
        http_agent: HttpAgent, triton_http, prometheus: str) -> None:
    x = np.random.default_rng(77).random((2, 64), dtype=np.float32)
    for i in range(5):
        inp = th.InferInput("input", [2, 64], "FP32")
        inp.set_data_from_numpy(x + i)
        triton_http.infer("mlp", [inp], model_version="1")
    _, now = scrape(http_agent)
    expected = now[("nv_inference_request_success", _mv("mlp", "1"))]
    assert expected >= 5
    expr = 'nv_inference_request_success{job="edge-agent",model="mlp",version="1"}'

    def scraped() -> list[dict]:
        got = _query(prometheus, expr)
        return got if got and float(got[0]["value"][1]) >= expected else []

    eventually(scraped, timeout=120, interval=0.5,
               message=f"prometheus never had {expr} >= {expected}")
    up = _query(prometheus, 'up{job="edge-agent"}')
    assert up and up[0]["value"][1] == "1"
    gauges = _query(prometheus, 'edge_model_version_ready{job="edge-agent",model="mlp"}')
    assert {g["metric"]["version"] for g in gauges} >= {"1", "2"}
    # every query of the shipped Grafana dashboard is valid PromQL, and those over the
    # inference counters find this agent's series
    dashboard = json.loads((Path(__file__).resolve().parents[2] / "docs"
                            / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [a["expr"] for a in dashboard["annotations"]["list"]]
    assert len(exprs) > 20
    for expr in exprs:
        concrete = (expr.replace("$__rate_interval", "1m").replace("$__range", "1h")
                    .replace("$job", ".*").replace("$instance", ".*").replace("$model", ".*"))
        status, body = _get(f"{prometheus}/api/v1/query?"
                            + urllib.parse.urlencode({"query": concrete}))
        assert status == 200 and json.loads(body)["status"] == "success", (expr, body[:300])
    # a summary quantile (issue 28's families) through PromQL
    p99 = 'nv_inference_compute_infer_summary_us{job="edge-agent",model="mlp",quantile="0.99"}'
    got = eventually(lambda: _query(prometheus, p99), timeout=120, interval=0.5,
                     message=f"prometheus never had {p99}")
    assert all(float(r["value"][1]) > 0 for r in got)
    found = _query(prometheus, 'sum by (instance, model) (nv_inference_request_success'
                               '{job=~".*",instance=~".*",model=~".*"})')
    assert {r["metric"]["model"] for r in found} >= {"mlp"}
