"""Device and agent process samples (CPU, memory, RSS, temperature, free disk) via psutil."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

log = logging.getLogger(__name__)

# Sensor chip names that report the SoC / CPU package, in order of preference.
_CPU_SENSORS = ("coretemp", "k10temp", "cpu_thermal", "cpu-thermal", "soc_thermal",
                "thermal_zone0", "acpitz")


@dataclass(frozen=True, slots=True)
class SystemSample:
    """One system sample; ``temp_c`` is None where the device reports no temperature."""

    ts: int
    cpu_percent: float
    mem_percent: float
    rss_bytes: int
    temp_c: float | None
    disk_free_bytes: int


class SystemSampler:
    """Takes :class:`SystemSample` s of this device and this process (about 0.2 ms each).

    ``rss_bytes`` counts the agent and its child processes (the runtime processes of isolated
    models); the list of children is refreshed every ``children_every`` samples (listing them
    scans /proc, ~1-2 ms).
    """

    def __init__(self, state_dir: str | os.PathLike[str], *, children_every: int = 10) -> None:
        self.state_dir = Path(state_dir)
        self._proc = psutil.Process()
        self._children: list[psutil.Process] = []
        self._children_every = max(1, children_every)
        self._samples = 0
        psutil.cpu_percent(interval=None)  # prime: the first reading is meaningless
        self._temps_ok = hasattr(psutil, "sensors_temperatures")

    def sample(self, ts: int | None = None) -> SystemSample:
        """Sample now; ``ts`` (unix seconds) defaults to the current second."""
        try:
            disk_free = psutil.disk_usage(str(self.state_dir)).free
        except OSError:
            disk_free = -1
        return SystemSample(
            ts=int(time.time()) if ts is None else ts,
            cpu_percent=float(psutil.cpu_percent(interval=None)),
            mem_percent=float(psutil.virtual_memory().percent),
            rss_bytes=self._rss(),
            temp_c=self._temperature(),
            disk_free_bytes=int(disk_free),
        )

    def _rss(self) -> int:
        if self._samples % self._children_every == 0:
            try:
                self._children = self._proc.children()
            except psutil.Error:
                self._children = []
        self._samples += 1
        total = self._proc.memory_info().rss
        for child in list(self._children):
            try:
                total += child.memory_info().rss
            except psutil.Error:  # a runtime process replaced since the last listing
                self._children.remove(child)
        return int(total)

    def _temperature(self) -> float | None:
        if not self._temps_ok:
            return None
        try:
            sensors = psutil.sensors_temperatures()
        except Exception as exc:  # platform quirks: unreadable sysfs files, permissions
            log.debug("temperature sensors unavailable: %s", exc)
            self._temps_ok = False
            return None
        if not sensors:
            return None
        for name in (*_CPU_SENSORS, *sorted(sensors)):
            readings = [t.current for t in sensors.get(name, ()) if t.current is not None]
            if readings:
                return float(max(readings))
        return None
