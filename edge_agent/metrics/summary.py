"""``edge-agent metrics --state-dir DIR``: a rich table of recent metrics from the database."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from edge_agent.metrics.store import DB_NAME, MetricsStore, StoredMetricPoint, StoredSystemPoint


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def build_summary_table(points: list[StoredMetricPoint], system: StoredSystemPoint | None,
                        window_s: int) -> Table:
    """The per model version table (and a system line in the caption)."""
    table = Table(title=f"edge-agent metrics, last {window_s} s", title_justify="left")
    for col in ("model", "version", "requests", "req/s", "errors", "mean batch",
                "p50 ms", "p95 ms", "p99 ms", "queue p99 ms", "cache hits"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for p in points:
        table.add_row(p.model, str(p.version), str(p.requests), f"{p.requests_per_s:.1f}",
                      f"{p.errors} ({p.error_rate:.1%})",
                      "-" if p.mean_batch is None else f"{p.mean_batch:.1f}",
                      _ms(p.p50_ms), _ms(p.p95_ms), _ms(p.p99_ms), _ms(p.queue_p99_ms),
                      f"{p.cache_hits} ({p.cache_hit_rate:.0%})" if p.cache_hits and
                      p.cache_hit_rate is not None else "-")
    if system is not None:
        temp = "" if system.temp_c is None else f"  temp {system.temp_c:.0f} °C"
        table.caption = (f"cpu {system.cpu_percent:.0f}%  mem {system.mem_percent:.0f}%  "
                         f"agent rss {system.rss_bytes / 2**20:.0f} MiB{temp}  "
                         f"disk free {system.disk_free_bytes / 2**30:.1f} GiB")
    return table


def load_residency(state_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The agent's last residency snapshot (budget, loaded or not, loads, waits), or None."""
    import json

    try:
        data = json.loads((Path(state_dir) / "residency.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _loaded_cell(model: dict[str, Any]) -> str:
    """The version that serves, then any other version still in memory (a swap draining)."""
    serving = model.get("serving_version", model.get("loaded_version"))
    others = [v for v in model.get("loaded_versions", []) if v != serving]
    cell = "-" if serving is None else f"v{serving}"
    return cell + (f" (+{', '.join(f'v{v}' for v in others)})" if others else "")


def build_residency_table(data: dict[str, Any]) -> Table:
    """Which models are in memory (the version that serves first), their figures, loads and
    the waits of first requests."""
    budget = data.get("budget_bytes")
    used = int(data.get("used_bytes") or 0)
    title = (f"models in memory: {used / 2**20:.0f} MiB"
             + (f" of a {budget / 2**20:.0f} MiB budget" if budget else " (no budget)"))
    table = Table(title=title, title_justify="left")
    for col in ("model", "loaded", "memory MiB", "loads", "unloads", "waits",
                "mean wait ms", "state"):
        table.add_column(col, justify="left" if col in ("model", "state") else "right")
    for m in data.get("models", []):
        waits = int(m.get("waits", 0))
        table.add_row(str(m.get("model")),
                      _loaded_cell(m),
                      f"{int(m.get('memory_bytes', 0)) / 2**20:.1f}", str(m.get("loads", 0)),
                      str(m.get("unloads", 0)), str(waits),
                      f"{float(m.get('wait_ms', 0)) / waits:.1f}" if waits else "-",
                      str(m.get("state", "")))
    return table


def load_summary(state_dir: str | os.PathLike[str], window_s: int = 60, now: float | None = None
                 ) -> tuple[list[StoredMetricPoint], StoredSystemPoint | None]:
    """Per model version points over the last ``window_s`` seconds and the latest system
    sample. Opens the database read-only (safe while the agent runs); StateStoreError when
    there is no metrics database in ``state_dir``."""
    now = time.time() if now is None else now
    with MetricsStore(Path(state_dir) / DB_NAME, readonly=True) as store:
        return store.summary(window_s, now=now), store.latest_system()


def summary_json(state_dir: str | os.PathLike[str], window_s: int = 60,
                 now: float | None = None) -> dict[str, Any]:
    """The summary as plain data (``edge-agent metrics --json``)."""
    points, system = load_summary(state_dir, window_s, now)
    return {"window_s": window_s, "points": [dataclasses.asdict(p) for p in points],
            "system": dataclasses.asdict(system) if system is not None else None,
            "residency": load_residency(state_dir)}


def render_summary(state_dir: str | os.PathLike[str], console: Console, window_s: int = 60,
                   now: float | None = None) -> int:
    """Print the metrics summary of the agent whose state is in ``state_dir``.

    Returns the number of model versions shown (see :func:`load_summary`).
    """
    points, system = load_summary(state_dir, window_s, now)
    if not points:
        console.print(f"No requests in the last {window_s} s.")
    console.print(build_summary_table(points, system, window_s))
    residency = load_residency(state_dir)
    if residency is not None:
        console.print(build_residency_table(residency))
    return len(points)
