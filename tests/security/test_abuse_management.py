"""Management abuses (issue 19): stalled uploads, wrong declared sizes, streams that outlive a
token rotation, and floods of wrong tokens. A real in-process agent on 127.0.0.1."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from edge_agent.client.agent_client import AgentClient
from edge_agent.management.auth import FREE_FAILURES, bearer
from edge_agent.management.generated import management_pb2 as pb
from edge_agent.management.generated import management_pb2_grpc as pb_grpc
from edge_agent.state.token import rotate_token
from packager.bundle.format import MAX_TOTAL_BYTES
from tests.security.abuse import limited_agent
from tests.support.bundles import Bundles
from tests.support.eventually import eventually
from tests.support.harness import InProcessAgent

CHUNK = b"\0" * 20480


class StalledUpload:
    """A Deploy stream that sends a header and ``chunks`` chunks, then nothing until released
    (and then ``after``, if given)."""

    def __init__(self, agent: InProcessAgent, size: int, *, chunks: int = 1,
                 after: list[bytes] | None = None, token: str | None = None) -> None:
        self.channel = grpc.insecure_channel(agent.management)
        self.stub = pb_grpc.AgentManagementStub(self.channel)
        self.size, self.chunks, self.after = size, chunks, after or []
        self.token = token or agent.token
        self.release = threading.Event()
        self.sent_all = threading.Event()
        self.outcome: str | None = None
        self.events: list[str] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _requests(self) -> Iterator[pb.DeployRequest]:
        yield pb.DeployRequest(header=pb.DeployHeader(filename="stall.edgepkg",
                                                      size_bytes=self.size))
        for _ in range(self.chunks):
            yield pb.DeployRequest(chunk=CHUNK)
        self.sent_all.set()
        self.release.wait(120)
        for chunk in self.after:
            yield pb.DeployRequest(chunk=chunk)

    def _run(self) -> None:
        try:
            for event in self.stub.Deploy(self._requests(), metadata=bearer(self.token),
                                          timeout=120):
                self.events.append(event.WhichOneof("event") or "")
            self.outcome = "OK"
        except grpc.RpcError as exc:
            self.outcome = f"{exc.code().name}: {exc.details()}"

    def __enter__(self) -> StalledUpload:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self._thread.join(60)
        self.channel.close()


def _tune(agent: InProcessAgent, **limits: float) -> None:
    """Shorten the management servicer's upload limits (the running agent's own object)."""
    assert agent.runtime is not None and agent.runtime.management is not None
    for key, value in limits.items():
        setattr(agent.runtime.management.server.servicer, key, value)


def _get_info_ok(agent: InProcessAgent) -> bool:
    try:
        with AgentClient(agent.management, token=agent.token, timeout_s=10) as client:
            return bool(client.info().agent_id)
    except Exception:
        return False


def _leftovers(agent: InProcessAgent) -> list[Path]:
    incoming = agent.state_dir / "incoming"
    return list(incoming.iterdir()) if incoming.exists() else []


def test_stalled_uploads_are_dropped_and_get_info_keeps_answering(
        bundles: Bundles, tmp_path: Path) -> None:
    with limited_agent(tmp_path / "state", bundles, deploy=False) as agent:
        _tune(agent, upload_idle_s=5.0)
        uploads = [StalledUpload(agent, 100_000) for _ in range(16)]
        try:
            for u in uploads:
                u.__enter__()
            # capped: beyond 4 deploys at once, refused at once; GetInfo keeps answering
            eventually(lambda: sum(u.outcome is not None for u in uploads) >= 12,
                              message="fewer than 12 uploads ended")
            with AgentClient(agent.management, token=agent.token, timeout_s=10) as client:
                assert client.info().agent_id
            # the stalled ones are dropped after the idle deadline, partial files removed
            eventually(lambda: all(u.outcome is not None for u in uploads),
                              message="never true: all(u.outcome is not None for u in uploads)")
            outcomes = [u.outcome or "" for u in uploads]
            refused = [o for o in outcomes if o.startswith("RESOURCE_EXHAUSTED")]
            dropped = [o for o in outcomes
                       if o.startswith("DEADLINE_EXCEEDED") and "sent nothing for 5 s" in o]
            assert len(refused) + len(dropped) == 16 and len(dropped) >= 4, outcomes
            assert len(refused) >= 8, outcomes
            eventually(lambda: not _leftovers(agent), message=lambda: str(_leftovers(agent)))
        finally:
            for u in uploads:
                u.__exit__()
        with AgentClient(agent.management, token=agent.token) as client:
            assert client.deploy(bundles.mlp[1]).ok


def test_an_upload_past_its_total_deadline_is_dropped(bundles: Bundles, tmp_path: Path) -> None:
    with limited_agent(tmp_path / "state", bundles, deploy=False) as agent:
        _tune(agent, upload_idle_s=60.0, upload_total_s=1.0)
        with StalledUpload(agent, 100_000) as upload:
            eventually(lambda: upload.outcome is not None,
                              message="never true: upload.outcome is not None")
        assert upload.outcome is not None and upload.outcome.startswith("DEADLINE_EXCEEDED")
        assert "took longer than 1 s" in upload.outcome


@pytest.mark.parametrize(("size", "code", "words"), [
    (0, "INVALID_ARGUMENT", "declares 0 bytes"),
    (-5, "INVALID_ARGUMENT", "declares -5 bytes"),
    (MAX_TOTAL_BYTES + 1, "RESOURCE_EXHAUSTED", "more than"),
    (100, "INVALID_ARGUMENT", "sent more than the 100 bytes its header declared"),
])
def test_declared_sizes_are_checked(bundles: Bundles, tmp_path: Path, size: int, code: str,
                                    words: str) -> None:
    with limited_agent(tmp_path / "state", bundles, deploy=False) as agent, \
            StalledUpload(agent, size) as upload:
        eventually(lambda: upload.outcome is not None, timeout=30,
                          message="not refused at once")
        assert upload.outcome is not None and upload.outcome.startswith(code), upload.outcome
        assert words in upload.outcome
        eventually(lambda: not _leftovers(agent),
                          message="never true: not _leftovers(agent)")


def test_rotating_the_token_ends_an_upload_opened_with_the_old_one(
        bundles: Bundles, tmp_path: Path) -> None:
    data = bundles.mlp[2].read_bytes()
    with limited_agent(tmp_path / "state", bundles) as agent:
        upload = StalledUpload(agent, len(data), chunks=0, after=[data])
        with upload:
            assert upload.sent_all.wait(30)
            # rotate only once the agent has taken the call up (authenticated with the old
            # token): on a busy machine the client sends its header before that
            assert agent.runtime is not None and agent.runtime.management is not None
            servicer = agent.runtime.management.server.servicer
            eventually(lambda: servicer._deploys._value < servicer.max_deploys,
                       message="the agent never took the upload up")
            rotate_token(agent.state_dir)
            upload.release.set()
            eventually(lambda: upload.outcome is not None,
                              message="never true: upload.outcome is not None")
        assert upload.outcome is not None and upload.outcome.startswith("UNAUTHENTICATED")
        assert "rotated" in upload.outcome
        assert "step" not in upload.events  # never reached verification
        with AgentClient(agent.management, token=agent.token) as client:
            assert [v.version for v in client.models("mlp")] == [1]


def test_rotating_the_token_ends_a_metrics_watch(bundles: Bundles, tmp_path: Path) -> None:
    with limited_agent(tmp_path / "state", bundles, deploy=False) as agent, \
            grpc.insecure_channel(agent.management) as channel:
        stream = pb_grpc.AgentManagementStub(channel).WatchMetrics(
            pb.WatchMetricsRequest(), metadata=bearer(agent.token), timeout=120)
        next(stream)  # samples flow
        rotate_token(agent.state_dir)
        with pytest.raises(grpc.RpcError) as info:
            for _ in range(30):  # a sample a second: ends at the next one
                next(stream)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "rotated" in (info.value.details() or "")


def test_wrong_tokens_are_logged_and_slowed_per_peer(
        bundles: Bundles, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="edge_agent.management.auth")
    with limited_agent(tmp_path / "state", bundles, deploy=False) as agent, \
            grpc.insecure_channel(agent.management) as channel:
        stub = pb_grpc.AgentManagementStub(channel)
        details = []
        for i in range(FREE_FAILURES + 6):
            with pytest.raises(grpc.RpcError) as info:
                stub.GetInfo(pb.GetInfoRequest(), metadata=bearer(f"guess-{i}"), timeout=30)
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
            details.append(info.value.details() or "")
        late = [d for d in details if "late:" in d]
        # the first failures in a row are answered at once, every one after them late
        assert late == details[FREE_FAILURES:], details
        assert "answered 1.0 s late: 16 failures in a row from ipv4:127.0.0.1" in late[-1]
        lines = [r.getMessage() for r in caplog.records
                 if r.name == "edge_agent.management.auth"]
        assert lines and len(lines) <= 10, lines
        assert all("GetInfo" in line and "127.0.0.1" in line for line in lines)
        assert agent.token not in caplog.text
        # the right token is never slowed, and clears the count
        assert stub.GetInfo(pb.GetInfoRequest(), metadata=bearer(agent.token),
                            timeout=10).agent_id
        with pytest.raises(grpc.RpcError) as info:
            stub.GetInfo(pb.GetInfoRequest(), metadata=bearer("again"), timeout=30)
        assert "late" not in (info.value.details() or "")


def test_undecodable_management_calls_log_no_traceback(
        bundles: Bundles, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with limited_agent(tmp_path / "state", bundles, deploy=False) as agent, \
            grpc.insecure_channel(agent.management) as channel:
        call = channel.unary_unary("/edge.agent.v1.AgentManagement/ListModels",
                                   request_serializer=None, response_deserializer=None)
        for token, code in ((agent.token, grpc.StatusCode.INVALID_ARGUMENT),
                            (None, grpc.StatusCode.UNAUTHENTICATED)):
            for _ in range(FREE_FAILURES + 2):
                with pytest.raises(grpc.RpcError) as info:
                    call(b"\xff\xff\xff\xff", metadata=bearer(token) if token else None,
                         timeout=30)
                assert info.value.code() == code
                if token:
                    assert "not a valid edge.agent.v1.ListModelsRequest" in (
                        info.value.details() or "")
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    assert len([r for r in caplog.records if "undecodable" in r.getMessage()]) <= 10


def test_silent_calls_without_the_token_hold_no_management_thread(
        bundles: Bundles, tmp_path: Path) -> None:
    """32 GetInfo calls without a token that never send their request (more than the 16
    management threads): refused at once, unread; the operator's calls are served."""
    with limited_agent(tmp_path / "state", bundles, deploy=False) as agent, \
            grpc.insecure_channel(agent.management) as channel:
        call = channel.stream_unary("/edge.agent.v1.AgentManagement/GetInfo",
                                    request_serializer=None, response_deserializer=None)
        release = threading.Event()

        def never() -> Iterator[bytes]:
            release.wait(120)
            yield from ()

        silent = [call.future(never(), timeout=120) for _ in range(32)]
        try:
            eventually(lambda: all(f.done() for f in silent), timeout=30,
                              message="never true: all(f.done() for f in silent)")
            assert {f.exception().code() for f in silent} == {grpc.StatusCode.UNAUTHENTICATED}
            assert _get_info_ok(agent)
        finally:
            release.set()
            for f in silent:
                f.cancel()
