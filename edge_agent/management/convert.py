"""Translation between the manager's values and edge.agent.v1 messages (both directions).

The client (and so the console) uses only the messages -> values direction: the agent's
types are imported for annotations only, so importing this module loads no manager, metrics
store or state store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edge_agent.client.types import (
    AgentInfo,
    DeploymentInfo,
    DeployResult,
    DoctorFinding,
    DoctorReport,
    LogLine,
    MetricPoint,
    MetricsSample,
    StepInfo,
    SystemPoint,
    VersionInfo,
)
from edge_agent.management.generated import management_pb2 as pb

if TYPE_CHECKING:
    from edge_agent.deploy.outcome import DeployOutcome, StepEvent, VersionView
    from edge_agent.metrics.store import MetricPoint as StoredPoint
    from edge_agent.state.records import Deployment, StepRecord

NONE = -1
NO_TEMP = -1000.0


def _opt(v: float | None, none: float = NONE) -> float:
    return none if v is None else v


def _back(v: float, none: float = NONE) -> float | None:
    return None if v == none else v


# -- agent -> messages ---------------------------------------------------------------------

def step_pb(step: StepRecord | StepEvent) -> pb.DeploymentStep:
    return pb.DeploymentStep(step=str(step.step), ok=step.ok, message=step.message,
                             at=getattr(step, "at", 0.0))


def deployment_pb(d: Deployment) -> pb.Deployment:
    return pb.Deployment(
        id=d.id, model=d.model, kind=str(d.kind),
        from_version=NONE if d.from_version is None else d.from_version,
        to_version=NONE if d.to_version is None else d.to_version, status=str(d.status),
        last_step=str(d.last_step or ""), reason=d.reason, started_at=d.started_at,
        ended_at=d.ended_at or 0.0, steps=[step_pb(s) for s in d.steps])


def result_pb(o: DeployOutcome) -> pb.DeploymentResult:
    return pb.DeploymentResult(ok=o.ok, message=o.message,
                               active_version=NONE if o.active_version is None
                               else o.active_version,
                               deployment=deployment_pb(o.deployment))


def version_pb(v: VersionView) -> pb.ModelVersionInfo:
    return pb.ModelVersionInfo(
        model=v.model, version=v.version, active=v.active, state=v.state,
        stored_state=v.stored_state, profile=v.profile, backend=v.backend,
        load_ms=v.load_ms or 0.0, rss_delta_bytes=v.rss_delta_bytes or 0,
        load_error=v.load_error, size_bytes=v.size_bytes, added_at=v.added_at,
        parity_checked=v.parity is not None, parity_ok=bool(v.parity and v.parity[0]),
        parity=v.parity[1] if v.parity else "",
        memory_bytes=v.memory_bytes, memory_source=v.memory_source, load_mode=v.load_mode,
        pinned=v.pinned, residency=v.residency, loads=v.loads, unloads=v.unloads,
        load_waits=v.load_waits, load_wait_ms=v.load_wait_ms,
        response_cache=v.response_cache, cache_hits=v.cache_hits,
        cache_misses=v.cache_misses)


def point_pb(p: StoredPoint) -> pb.MetricPoint:
    return pb.MetricPoint(
        ts=p.ts, step_s=p.step_s, model=p.model,
        version=NONE if p.version is None else p.version, requests=p.requests,
        errors=p.errors, requests_per_s=p.requests_per_s, error_rate=p.error_rate,
        mean_batch=_opt(p.mean_batch), p50_ms=_opt(p.p50_ms), p95_ms=_opt(p.p95_ms),
        p99_ms=_opt(p.p99_ms), queue_p99_ms=_opt(p.queue_p99_ms))


# -- messages -> client values --------------------------------------------------------------

def agent_info(m: pb.AgentInfo) -> AgentInfo:
    return AgentInfo(agent_id=m.agent_id, name=m.name, host=m.host, arch=m.arch,
                     profile=m.profile, runtimes=tuple(m.runtimes),
                     agent_version=m.agent_version, uptime_s=m.uptime_s,
                     api_version=m.api_version, inference_address=m.inference_address,
                     allow_unsigned=m.allow_unsigned, keep_versions=m.keep_versions,
                     memory_budget_bytes=m.memory_budget_bytes or None,
                     memory_used_bytes=m.memory_used_bytes)


def version_info(m: pb.ModelVersionInfo) -> VersionInfo:
    return VersionInfo(model=m.model, version=m.version, active=m.active, state=m.state,
                       stored_state=m.stored_state, profile=m.profile, backend=m.backend,
                       load_ms=m.load_ms or None, rss_delta_bytes=m.rss_delta_bytes or None,
                       load_error=m.load_error, size_bytes=m.size_bytes, added_at=m.added_at,
                       parity=(m.parity_ok, m.parity) if m.parity_checked else None,
                       memory_bytes=m.memory_bytes, memory_source=m.memory_source,
                       load_mode=m.load_mode or "eager", pinned=m.pinned,
                       residency=m.residency, loads=m.loads, unloads=m.unloads,
                       load_waits=m.load_waits, load_wait_ms=m.load_wait_ms,
                       response_cache=m.response_cache, cache_hits=m.cache_hits,
                       cache_misses=m.cache_misses)


def doctor_report(m: pb.DoctorReport) -> DoctorReport:
    return DoctorReport(ok=m.ok, findings=tuple(
        DoctorFinding(area=f.area, check=f.check, status=f.status, detail=f.detail, fix=f.fix)
        for f in m.findings))


def log_line(m: pb.LogLine) -> LogLine:
    return LogLine(seq=m.seq, ts=m.ts, level=m.level, logger=m.logger, message=m.message)


def system_point(m: pb.SystemPoint) -> SystemPoint:
    return SystemPoint(ts=m.ts, step_s=m.step_s, cpu_percent=m.cpu_percent,
                       mem_percent=m.mem_percent, rss_bytes=m.rss_bytes,
                       temp_c=m.temp_c if m.has_temp else None,
                       disk_free_bytes=m.disk_free_bytes)


def step_info(m: pb.DeploymentStep) -> StepInfo:
    return StepInfo(step=m.step, ok=m.ok, message=m.message, at=m.at)


def deployment_info(m: pb.Deployment) -> DeploymentInfo:
    return DeploymentInfo(
        id=m.id, model=m.model, kind=m.kind,
        from_version=None if m.from_version == NONE else m.from_version,
        to_version=None if m.to_version == NONE else m.to_version, status=m.status,
        last_step=m.last_step, reason=m.reason, started_at=m.started_at,
        ended_at=m.ended_at or None, steps=tuple(step_info(s) for s in m.steps))


def deploy_result(m: pb.DeploymentResult) -> DeployResult:
    return DeployResult(ok=m.ok, message=m.message,
                        active_version=None if m.active_version == NONE else m.active_version,
                        deployment=deployment_info(m.deployment)
                        if m.HasField("deployment") else None)


def metric_point(m: pb.MetricPoint) -> MetricPoint:
    return MetricPoint(ts=m.ts, step_s=m.step_s, model=m.model,
                       version=None if m.version == NONE else m.version, requests=m.requests,
                       errors=m.errors, requests_per_s=m.requests_per_s,
                       error_rate=m.error_rate, mean_batch=_back(m.mean_batch),
                       p50_ms=_back(m.p50_ms), p95_ms=_back(m.p95_ms), p99_ms=_back(m.p99_ms),
                       queue_p99_ms=_back(m.queue_p99_ms))


def metrics_sample(m: pb.MetricsSample) -> MetricsSample:
    system = None
    if m.HasField("system"):
        s = m.system
        system = {"cpu_percent": s.cpu_percent, "mem_percent": s.mem_percent,
                  "rss_bytes": float(s.rss_bytes), "disk_free_bytes": float(s.disk_free_bytes)}
        if s.temp_c != NO_TEMP:
            system["temp_c"] = s.temp_c
    return MetricsSample(ts=m.ts, points=tuple(metric_point(p) for p in m.points),
                         system=system)
