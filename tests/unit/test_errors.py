"""The agent's error codes and their one mapping per protocol (gRPC status, HTTP status)."""

from __future__ import annotations

import grpc
import pytest

from edge_agent import errors
from edge_agent.errors import AgentError, ErrorCode
from edge_agent.frontends.common.errors import STATUS, error_message, http_status
from edge_agent.frontends.grpc.status import GRPC_CODES, grpc_code

EXPECTED = [
    (errors.InvalidInputError, grpc.StatusCode.INVALID_ARGUMENT, 400),
    (errors.DecoupledModelError, grpc.StatusCode.INVALID_ARGUMENT, 400),
    (errors.ModelNotFoundError, grpc.StatusCode.NOT_FOUND, 404),
    (errors.QueueFullError, grpc.StatusCode.RESOURCE_EXHAUSTED, 429),
    (errors.ModelUnavailableError, grpc.StatusCode.UNAVAILABLE, 503),
    (errors.RequestTimeoutError, grpc.StatusCode.DEADLINE_EXCEEDED, 504),
    (errors.BackendError, grpc.StatusCode.INTERNAL, 500),
    (errors.BackendCrashedError, grpc.StatusCode.UNAVAILABLE, 503),
    (errors.RuntimeMissingError, grpc.StatusCode.FAILED_PRECONDITION, 400),
    (errors.ConfigError, grpc.StatusCode.INVALID_ARGUMENT, 400),
]


@pytest.mark.parametrize(("error", "status", "http"), EXPECTED)
def test_each_error_maps_to_its_grpc_and_http_status(error: type[AgentError],
                                                     status: grpc.StatusCode,
                                                     http: int) -> None:
    exc = error("why it failed")
    assert grpc_code(exc) is status
    assert http_status(exc) == http
    assert error_message(exc) == "why it failed"


def test_every_code_has_a_grpc_and_an_http_status() -> None:
    assert set(GRPC_CODES) == set(ErrorCode) == set(STATUS)


def test_a_bug_is_internal_and_says_so() -> None:
    exc = KeyError("slot")
    assert grpc_code(exc) is grpc.StatusCode.INTERNAL
    assert http_status(exc) == 500
    assert error_message(exc) == "internal error: KeyError: 'slot'"


def test_an_agent_error_without_text_is_named_by_its_class() -> None:
    assert error_message(errors.QueueFullError()) == "QueueFullError"
