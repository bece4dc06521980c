"""Translation from the deploy lifecycle's values to edge.agent.v1 messages (the servicer's half).

The other direction (messages -> the client's values) is :mod:`edge_agent.client.convert`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edge_agent.management.generated import management_pb2 as pb
from edge_agent.management.wire import NONE, opt

if TYPE_CHECKING:
    from edge_agent.deploy.outcome import DeployOutcome, StepEvent, VersionView
    from edge_agent.metrics.store import StoredMetricPoint
    from edge_agent.state.records import Deployment, StepRecord


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
        cache_misses=v.cache_misses, cancelled_requests=v.cancelled_requests,
        sequences_active=v.sequences_active, sequence_slots=v.sequence_slots)


def point_pb(p: StoredMetricPoint) -> pb.MetricPoint:
    return pb.MetricPoint(
        ts=p.ts, step_s=p.step_s, model=p.model,
        version=NONE if p.version is None else p.version, requests=p.requests,
        errors=p.errors, requests_per_s=p.requests_per_s, error_rate=p.error_rate,
        mean_batch=opt(p.mean_batch), p50_ms=opt(p.p50_ms), p95_ms=opt(p.p95_ms),
        p99_ms=opt(p.p99_ms), queue_p99_ms=opt(p.queue_p99_ms))
