"""Translation from edge.agent.v1 messages to the client's values (what the console sees).

Imports only the generated messages and :mod:`edge_agent.client.types`: no manager, metrics
store or state store.
"""

from __future__ import annotations

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
from edge_agent.management.wire import NO_TEMP, NONE, back

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
                       cache_misses=m.cache_misses, cancelled_requests=m.cancelled_requests,
                       sequences_active=m.sequences_active, sequence_slots=m.sequence_slots)


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
                       error_rate=m.error_rate, mean_batch=back(m.mean_batch),
                       p50_ms=back(m.p50_ms), p95_ms=back(m.p95_ms), p99_ms=back(m.p99_ms),
                       queue_p99_ms=back(m.queue_p99_ms))


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
