"""The management API's diagnostics: the device doctor, the agent's own log, stored device samples.

Kept apart from :mod:`edge_agent.management.servicer` (deploys and metrics); the servicer's
GetDoctor, StreamLogs and QuerySystemMetrics delegate here.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from edge_agent.errors import InvalidInputError
from edge_agent.log_ring import LogRing, RingEntry, level_number
from edge_agent.management.generated import management_pb2 as pb
from edge_agent.metrics.store import MetricsStore

DEFAULT_TAIL = 200
DOCTOR_CACHE_S = 10.0  # a second GetDoctor within this reuses the first answer (it runs tools)


class Diagnostics:
    """What GetDoctor, StreamLogs and QuerySystemMetrics answer from."""

    def __init__(self, state_dir: Path | None, ring: LogRing | None,
                 metrics: MetricsStore | None) -> None:
        self.state_dir = state_dir
        self.ring = ring
        self.metrics = metrics
        self._doctor_lock = threading.Lock()
        self._doctor: tuple[float, pb.DoctorReport] | None = None

    def doctor(self) -> pb.DoctorReport:
        """Run the device checks (one run at a time; a recent answer is reused)."""
        from edge_agent.doctor import failed, run_doctor

        with self._doctor_lock:
            if self._doctor is not None and time.monotonic() - self._doctor[0] < DOCTOR_CACHE_S:
                return self._doctor[1]
            findings = run_doctor(self.state_dir)
            report = pb.DoctorReport(ok=not failed(findings), findings=[
                pb.DoctorFinding(area=f.area, check=f.check, status=f.status, detail=f.detail,
                                 fix=f.fix) for f in findings])
            self._doctor = (time.monotonic(), report)
            return report

    def log_lines(self, request: pb.StreamLogsRequest,
                  active: Callable[[], bool]) -> Iterator[pb.LogLine]:
        """The tail, then (``follow``) new lines while ``active()`` holds."""
        if request.tail < 0:
            raise InvalidInputError(f"StreamLogs tail must be >= 0 (0: {DEFAULT_TAIL}), got "
                                    f"{request.tail}")
        try:
            floor = level_number(request.min_level)
        except ValueError as exc:
            raise InvalidInputError(f"StreamLogs: {exc}") from None
        if self.ring is None:
            return
        lines, seq = self.ring.tail(request.tail or DEFAULT_TAIL, floor)
        for line in lines:
            yield _line_pb(line)
        if not request.follow:
            return
        while active():
            lines, seq = self.ring.after(seq, floor, timeout=0.5)
            for line in lines:
                yield _line_pb(line)

    def system(self, request: pb.QuerySystemMetricsRequest,
               max_unix_s: float) -> pb.QuerySystemMetricsResponse:
        """Stored device samples over the asked range."""
        for label, value in (("start", request.start), ("end", request.end)):
            if not math.isfinite(value) or not 0 <= value < max_unix_s:
                raise InvalidInputError(
                    f"QuerySystemMetrics {label} must be unix seconds (0 or a positive number "
                    f"below {max_unix_s:.0f}), got {value!r}")
        if request.step_s < 0:
            raise InvalidInputError(f"QuerySystemMetrics step_s must be >= 0 (0: 60 s), got "
                                    f"{request.step_s}")
        if self.metrics is None:
            return pb.QuerySystemMetricsResponse()
        end = request.end or time.time()
        start = request.start or end - 3600
        points = self.metrics.system(start, end, request.step_s or 60)
        return pb.QuerySystemMetricsResponse(points=[
            pb.SystemPoint(ts=p.ts, step_s=p.step_s, cpu_percent=p.cpu_percent or 0.0,
                           mem_percent=p.mem_percent or 0.0, rss_bytes=p.rss_bytes or 0,
                           has_temp=p.temp_c is not None, temp_c=p.temp_c or 0.0,
                           disk_free_bytes=p.disk_free_bytes or 0) for p in points])


def _line_pb(line: RingEntry) -> pb.LogLine:
    return pb.LogLine(seq=line.seq, ts=line.ts, level=line.level, logger=line.logger,
                      message=line.message)
