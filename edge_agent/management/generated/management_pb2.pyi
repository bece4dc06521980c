from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AgentInfo(_message.Message):
    __slots__ = ("agent_id", "name", "host", "arch", "profile", "runtimes", "agent_version", "uptime_s", "api_version", "inference_address", "allow_unsigned", "keep_versions", "memory_budget_bytes", "memory_used_bytes")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    ARCH_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    RUNTIMES_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    UPTIME_S_FIELD_NUMBER: _ClassVar[int]
    API_VERSION_FIELD_NUMBER: _ClassVar[int]
    INFERENCE_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ALLOW_UNSIGNED_FIELD_NUMBER: _ClassVar[int]
    KEEP_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BUDGET_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    name: str
    host: str
    arch: str
    profile: str
    runtimes: _containers.RepeatedScalarFieldContainer[str]
    agent_version: str
    uptime_s: float
    api_version: str
    inference_address: str
    allow_unsigned: bool
    keep_versions: int
    memory_budget_bytes: int
    memory_used_bytes: int
    def __init__(self, agent_id: _Optional[str] = ..., name: _Optional[str] = ..., host: _Optional[str] = ..., arch: _Optional[str] = ..., profile: _Optional[str] = ..., runtimes: _Optional[_Iterable[str]] = ..., agent_version: _Optional[str] = ..., uptime_s: _Optional[float] = ..., api_version: _Optional[str] = ..., inference_address: _Optional[str] = ..., allow_unsigned: bool = ..., keep_versions: _Optional[int] = ..., memory_budget_bytes: _Optional[int] = ..., memory_used_bytes: _Optional[int] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: str
    def __init__(self, model: _Optional[str] = ...) -> None: ...

class ModelVersionInfo(_message.Message):
    __slots__ = ("model", "version", "active", "state", "stored_state", "profile", "backend", "load_ms", "rss_delta_bytes", "load_error", "size_bytes", "added_at", "parity_checked", "parity_ok", "parity", "memory_bytes", "memory_source", "load_mode", "pinned", "residency", "loads", "unloads", "load_waits", "load_wait_ms", "response_cache", "cache_hits", "cache_misses", "cancelled_requests", "sequences_active", "sequence_slots")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STORED_STATE_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    LOAD_MS_FIELD_NUMBER: _ClassVar[int]
    RSS_DELTA_BYTES_FIELD_NUMBER: _ClassVar[int]
    LOAD_ERROR_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    ADDED_AT_FIELD_NUMBER: _ClassVar[int]
    PARITY_CHECKED_FIELD_NUMBER: _ClassVar[int]
    PARITY_OK_FIELD_NUMBER: _ClassVar[int]
    PARITY_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_SOURCE_FIELD_NUMBER: _ClassVar[int]
    LOAD_MODE_FIELD_NUMBER: _ClassVar[int]
    PINNED_FIELD_NUMBER: _ClassVar[int]
    RESIDENCY_FIELD_NUMBER: _ClassVar[int]
    LOADS_FIELD_NUMBER: _ClassVar[int]
    UNLOADS_FIELD_NUMBER: _ClassVar[int]
    LOAD_WAITS_FIELD_NUMBER: _ClassVar[int]
    LOAD_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_CACHE_FIELD_NUMBER: _ClassVar[int]
    CACHE_HITS_FIELD_NUMBER: _ClassVar[int]
    CACHE_MISSES_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    SEQUENCES_ACTIVE_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_SLOTS_FIELD_NUMBER: _ClassVar[int]
    model: str
    version: int
    active: bool
    state: str
    stored_state: str
    profile: str
    backend: str
    load_ms: float
    rss_delta_bytes: int
    load_error: str
    size_bytes: int
    added_at: float
    parity_checked: bool
    parity_ok: bool
    parity: str
    memory_bytes: int
    memory_source: str
    load_mode: str
    pinned: bool
    residency: str
    loads: int
    unloads: int
    load_waits: int
    load_wait_ms: float
    response_cache: bool
    cache_hits: int
    cache_misses: int
    cancelled_requests: int
    sequences_active: int
    sequence_slots: int
    def __init__(self, model: _Optional[str] = ..., version: _Optional[int] = ..., active: bool = ..., state: _Optional[str] = ..., stored_state: _Optional[str] = ..., profile: _Optional[str] = ..., backend: _Optional[str] = ..., load_ms: _Optional[float] = ..., rss_delta_bytes: _Optional[int] = ..., load_error: _Optional[str] = ..., size_bytes: _Optional[int] = ..., added_at: _Optional[float] = ..., parity_checked: bool = ..., parity_ok: bool = ..., parity: _Optional[str] = ..., memory_bytes: _Optional[int] = ..., memory_source: _Optional[str] = ..., load_mode: _Optional[str] = ..., pinned: bool = ..., residency: _Optional[str] = ..., loads: _Optional[int] = ..., unloads: _Optional[int] = ..., load_waits: _Optional[int] = ..., load_wait_ms: _Optional[float] = ..., response_cache: bool = ..., cache_hits: _Optional[int] = ..., cache_misses: _Optional[int] = ..., cancelled_requests: _Optional[int] = ..., sequences_active: _Optional[int] = ..., sequence_slots: _Optional[int] = ...) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ("versions",)
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    versions: _containers.RepeatedCompositeFieldContainer[ModelVersionInfo]
    def __init__(self, versions: _Optional[_Iterable[_Union[ModelVersionInfo, _Mapping]]] = ...) -> None: ...

class ListDeploymentsRequest(_message.Message):
    __slots__ = ("model", "limit")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    model: str
    limit: int
    def __init__(self, model: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class DeploymentStep(_message.Message):
    __slots__ = ("step", "ok", "message", "at")
    STEP_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    step: str
    ok: bool
    message: str
    at: float
    def __init__(self, step: _Optional[str] = ..., ok: bool = ..., message: _Optional[str] = ..., at: _Optional[float] = ...) -> None: ...

class Deployment(_message.Message):
    __slots__ = ("id", "model", "kind", "from_version", "to_version", "status", "last_step", "reason", "started_at", "ended_at", "steps")
    ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    FROM_VERSION_FIELD_NUMBER: _ClassVar[int]
    TO_VERSION_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LAST_STEP_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    id: int
    model: str
    kind: str
    from_version: int
    to_version: int
    status: str
    last_step: str
    reason: str
    started_at: float
    ended_at: float
    steps: _containers.RepeatedCompositeFieldContainer[DeploymentStep]
    def __init__(self, id: _Optional[int] = ..., model: _Optional[str] = ..., kind: _Optional[str] = ..., from_version: _Optional[int] = ..., to_version: _Optional[int] = ..., status: _Optional[str] = ..., last_step: _Optional[str] = ..., reason: _Optional[str] = ..., started_at: _Optional[float] = ..., ended_at: _Optional[float] = ..., steps: _Optional[_Iterable[_Union[DeploymentStep, _Mapping]]] = ...) -> None: ...

class ListDeploymentsResponse(_message.Message):
    __slots__ = ("deployments",)
    DEPLOYMENTS_FIELD_NUMBER: _ClassVar[int]
    deployments: _containers.RepeatedCompositeFieldContainer[Deployment]
    def __init__(self, deployments: _Optional[_Iterable[_Union[Deployment, _Mapping]]] = ...) -> None: ...

class DeployHeader(_message.Message):
    __slots__ = ("filename", "size_bytes", "force")
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    filename: str
    size_bytes: int
    force: bool
    def __init__(self, filename: _Optional[str] = ..., size_bytes: _Optional[int] = ..., force: bool = ...) -> None: ...

class DeployRequest(_message.Message):
    __slots__ = ("header", "chunk")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    header: DeployHeader
    chunk: bytes
    def __init__(self, header: _Optional[_Union[DeployHeader, _Mapping]] = ..., chunk: _Optional[bytes] = ...) -> None: ...

class CheckDeployRequest(_message.Message):
    __slots__ = ("manifest", "signature", "size_bytes", "force", "filename")
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    manifest: bytes
    signature: bytes
    size_bytes: int
    force: bool
    filename: str
    def __init__(self, manifest: _Optional[bytes] = ..., signature: _Optional[bytes] = ..., size_bytes: _Optional[int] = ..., force: bool = ..., filename: _Optional[str] = ...) -> None: ...

class CheckDeployResponse(_message.Message):
    __slots__ = ("ok", "message", "refusal", "model", "version", "backend", "key_id")
    OK_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REFUSAL_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    message: str
    refusal: str
    model: str
    version: int
    backend: str
    key_id: str
    def __init__(self, ok: bool = ..., message: _Optional[str] = ..., refusal: _Optional[str] = ..., model: _Optional[str] = ..., version: _Optional[int] = ..., backend: _Optional[str] = ..., key_id: _Optional[str] = ...) -> None: ...

class UploadProgress(_message.Message):
    __slots__ = ("received_bytes", "total_bytes")
    RECEIVED_BYTES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    received_bytes: int
    total_bytes: int
    def __init__(self, received_bytes: _Optional[int] = ..., total_bytes: _Optional[int] = ...) -> None: ...

class DeploymentResult(_message.Message):
    __slots__ = ("ok", "message", "active_version", "deployment")
    OK_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_VERSION_FIELD_NUMBER: _ClassVar[int]
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    message: str
    active_version: int
    deployment: Deployment
    def __init__(self, ok: bool = ..., message: _Optional[str] = ..., active_version: _Optional[int] = ..., deployment: _Optional[_Union[Deployment, _Mapping]] = ...) -> None: ...

class DeployEvent(_message.Message):
    __slots__ = ("progress", "step", "result")
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    progress: UploadProgress
    step: DeploymentStep
    result: DeploymentResult
    def __init__(self, progress: _Optional[_Union[UploadProgress, _Mapping]] = ..., step: _Optional[_Union[DeploymentStep, _Mapping]] = ..., result: _Optional[_Union[DeploymentResult, _Mapping]] = ...) -> None: ...

class ActivateRequest(_message.Message):
    __slots__ = ("model", "version", "force")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    model: str
    version: int
    force: bool
    def __init__(self, model: _Optional[str] = ..., version: _Optional[int] = ..., force: bool = ...) -> None: ...

class RollbackRequest(_message.Message):
    __slots__ = ("model", "to_version")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TO_VERSION_FIELD_NUMBER: _ClassVar[int]
    model: str
    to_version: int
    def __init__(self, model: _Optional[str] = ..., to_version: _Optional[int] = ...) -> None: ...

class RemoveVersionRequest(_message.Message):
    __slots__ = ("model", "version")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    model: str
    version: int
    def __init__(self, model: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class QueryMetricsRequest(_message.Message):
    __slots__ = ("model", "start", "end", "step_s", "per_version")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    STEP_S_FIELD_NUMBER: _ClassVar[int]
    PER_VERSION_FIELD_NUMBER: _ClassVar[int]
    model: str
    start: float
    end: float
    step_s: int
    per_version: bool
    def __init__(self, model: _Optional[str] = ..., start: _Optional[float] = ..., end: _Optional[float] = ..., step_s: _Optional[int] = ..., per_version: bool = ...) -> None: ...

class MetricPoint(_message.Message):
    __slots__ = ("ts", "step_s", "model", "version", "requests", "errors", "requests_per_s", "error_rate", "mean_batch", "p50_ms", "p95_ms", "p99_ms", "queue_p99_ms")
    TS_FIELD_NUMBER: _ClassVar[int]
    STEP_S_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_PER_S_FIELD_NUMBER: _ClassVar[int]
    ERROR_RATE_FIELD_NUMBER: _ClassVar[int]
    MEAN_BATCH_FIELD_NUMBER: _ClassVar[int]
    P50_MS_FIELD_NUMBER: _ClassVar[int]
    P95_MS_FIELD_NUMBER: _ClassVar[int]
    P99_MS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_P99_MS_FIELD_NUMBER: _ClassVar[int]
    ts: int
    step_s: int
    model: str
    version: int
    requests: int
    errors: int
    requests_per_s: float
    error_rate: float
    mean_batch: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    queue_p99_ms: float
    def __init__(self, ts: _Optional[int] = ..., step_s: _Optional[int] = ..., model: _Optional[str] = ..., version: _Optional[int] = ..., requests: _Optional[int] = ..., errors: _Optional[int] = ..., requests_per_s: _Optional[float] = ..., error_rate: _Optional[float] = ..., mean_batch: _Optional[float] = ..., p50_ms: _Optional[float] = ..., p95_ms: _Optional[float] = ..., p99_ms: _Optional[float] = ..., queue_p99_ms: _Optional[float] = ...) -> None: ...

class QueryMetricsResponse(_message.Message):
    __slots__ = ("points",)
    POINTS_FIELD_NUMBER: _ClassVar[int]
    points: _containers.RepeatedCompositeFieldContainer[MetricPoint]
    def __init__(self, points: _Optional[_Iterable[_Union[MetricPoint, _Mapping]]] = ...) -> None: ...

class WatchMetricsRequest(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: str
    def __init__(self, model: _Optional[str] = ...) -> None: ...

class SystemSample(_message.Message):
    __slots__ = ("cpu_percent", "mem_percent", "rss_bytes", "temp_c", "disk_free_bytes")
    CPU_PERCENT_FIELD_NUMBER: _ClassVar[int]
    MEM_PERCENT_FIELD_NUMBER: _ClassVar[int]
    RSS_BYTES_FIELD_NUMBER: _ClassVar[int]
    TEMP_C_FIELD_NUMBER: _ClassVar[int]
    DISK_FREE_BYTES_FIELD_NUMBER: _ClassVar[int]
    cpu_percent: float
    mem_percent: float
    rss_bytes: int
    temp_c: float
    disk_free_bytes: int
    def __init__(self, cpu_percent: _Optional[float] = ..., mem_percent: _Optional[float] = ..., rss_bytes: _Optional[int] = ..., temp_c: _Optional[float] = ..., disk_free_bytes: _Optional[int] = ...) -> None: ...

class MetricsSample(_message.Message):
    __slots__ = ("ts", "points", "system")
    TS_FIELD_NUMBER: _ClassVar[int]
    POINTS_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_FIELD_NUMBER: _ClassVar[int]
    ts: int
    points: _containers.RepeatedCompositeFieldContainer[MetricPoint]
    system: SystemSample
    def __init__(self, ts: _Optional[int] = ..., points: _Optional[_Iterable[_Union[MetricPoint, _Mapping]]] = ..., system: _Optional[_Union[SystemSample, _Mapping]] = ...) -> None: ...

class GetDoctorRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DoctorFinding(_message.Message):
    __slots__ = ("area", "check", "status", "detail", "fix")
    AREA_FIELD_NUMBER: _ClassVar[int]
    CHECK_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    FIX_FIELD_NUMBER: _ClassVar[int]
    area: str
    check: str
    status: str
    detail: str
    fix: str
    def __init__(self, area: _Optional[str] = ..., check: _Optional[str] = ..., status: _Optional[str] = ..., detail: _Optional[str] = ..., fix: _Optional[str] = ...) -> None: ...

class DoctorReport(_message.Message):
    __slots__ = ("ok", "findings")
    OK_FIELD_NUMBER: _ClassVar[int]
    FINDINGS_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    findings: _containers.RepeatedCompositeFieldContainer[DoctorFinding]
    def __init__(self, ok: bool = ..., findings: _Optional[_Iterable[_Union[DoctorFinding, _Mapping]]] = ...) -> None: ...

class StreamLogsRequest(_message.Message):
    __slots__ = ("tail", "min_level", "follow")
    TAIL_FIELD_NUMBER: _ClassVar[int]
    MIN_LEVEL_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    tail: int
    min_level: str
    follow: bool
    def __init__(self, tail: _Optional[int] = ..., min_level: _Optional[str] = ..., follow: bool = ...) -> None: ...

class LogLine(_message.Message):
    __slots__ = ("seq", "ts", "level", "logger", "message")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TS_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    LOGGER_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    seq: int
    ts: float
    level: str
    logger: str
    message: str
    def __init__(self, seq: _Optional[int] = ..., ts: _Optional[float] = ..., level: _Optional[str] = ..., logger: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class QuerySystemMetricsRequest(_message.Message):
    __slots__ = ("start", "end", "step_s")
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    STEP_S_FIELD_NUMBER: _ClassVar[int]
    start: float
    end: float
    step_s: int
    def __init__(self, start: _Optional[float] = ..., end: _Optional[float] = ..., step_s: _Optional[int] = ...) -> None: ...

class SystemPoint(_message.Message):
    __slots__ = ("ts", "step_s", "cpu_percent", "mem_percent", "rss_bytes", "has_temp", "temp_c", "disk_free_bytes")
    TS_FIELD_NUMBER: _ClassVar[int]
    STEP_S_FIELD_NUMBER: _ClassVar[int]
    CPU_PERCENT_FIELD_NUMBER: _ClassVar[int]
    MEM_PERCENT_FIELD_NUMBER: _ClassVar[int]
    RSS_BYTES_FIELD_NUMBER: _ClassVar[int]
    HAS_TEMP_FIELD_NUMBER: _ClassVar[int]
    TEMP_C_FIELD_NUMBER: _ClassVar[int]
    DISK_FREE_BYTES_FIELD_NUMBER: _ClassVar[int]
    ts: int
    step_s: int
    cpu_percent: float
    mem_percent: float
    rss_bytes: int
    has_temp: bool
    temp_c: float
    disk_free_bytes: int
    def __init__(self, ts: _Optional[int] = ..., step_s: _Optional[int] = ..., cpu_percent: _Optional[float] = ..., mem_percent: _Optional[float] = ..., rss_bytes: _Optional[int] = ..., has_temp: bool = ..., temp_c: _Optional[float] = ..., disk_free_bytes: _Optional[int] = ...) -> None: ...

class QuerySystemMetricsResponse(_message.Message):
    __slots__ = ("points",)
    POINTS_FIELD_NUMBER: _ClassVar[int]
    points: _containers.RepeatedCompositeFieldContainer[SystemPoint]
    def __init__(self, points: _Optional[_Iterable[_Union[SystemPoint, _Mapping]]] = ...) -> None: ...

class DeployReferenceRequest(_message.Message):
    __slots__ = ("reference", "force")
    REFERENCE_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    reference: str
    force: bool
    def __init__(self, reference: _Optional[str] = ..., force: bool = ...) -> None: ...

class GetModelSettingsRequest(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: str
    def __init__(self, model: _Optional[str] = ...) -> None: ...

class ModelSetting(_message.Message):
    __slots__ = ("key", "value", "source")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: str
    source: str
    def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ..., source: _Optional[str] = ...) -> None: ...

class ModelSettings(_message.Message):
    __slots__ = ("model", "settings")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    model: str
    settings: _containers.RepeatedCompositeFieldContainer[ModelSetting]
    def __init__(self, model: _Optional[str] = ..., settings: _Optional[_Iterable[_Union[ModelSetting, _Mapping]]] = ...) -> None: ...

class SetModelSettingsRequest(_message.Message):
    __slots__ = ("model", "set", "unset", "replace", "revert")
    class SetEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SET_FIELD_NUMBER: _ClassVar[int]
    UNSET_FIELD_NUMBER: _ClassVar[int]
    REPLACE_FIELD_NUMBER: _ClassVar[int]
    REVERT_FIELD_NUMBER: _ClassVar[int]
    model: str
    set: _containers.ScalarMap[str, str]
    unset: _containers.RepeatedScalarFieldContainer[str]
    replace: bool
    revert: bool
    def __init__(self, model: _Optional[str] = ..., set: _Optional[_Mapping[str, str]] = ..., unset: _Optional[_Iterable[str]] = ..., replace: bool = ..., revert: bool = ...) -> None: ...

class TuningResult(_message.Message):
    __slots__ = ("id", "model", "at", "summary", "data_json")
    ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    DATA_JSON_FIELD_NUMBER: _ClassVar[int]
    id: int
    model: str
    at: float
    summary: str
    data_json: str
    def __init__(self, id: _Optional[int] = ..., model: _Optional[str] = ..., at: _Optional[float] = ..., summary: _Optional[str] = ..., data_json: _Optional[str] = ...) -> None: ...

class ListTuningRequest(_message.Message):
    __slots__ = ("model", "latest_only", "limit")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    LATEST_ONLY_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    model: str
    latest_only: bool
    limit: int
    def __init__(self, model: _Optional[str] = ..., latest_only: bool = ..., limit: _Optional[int] = ...) -> None: ...

class ListTuningResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[TuningResult]
    def __init__(self, results: _Optional[_Iterable[_Union[TuningResult, _Mapping]]] = ...) -> None: ...
