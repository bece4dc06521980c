"""ModelStreamInfer for decoupled models: many responses to one request (Triton's semantics).

Each response carries the request's id and the parameter ``triton_final_response`` (false);
when the request asks for it (``triton_enable_empty_final_response``, as tritonclient's
``async_stream_infer(..., enable_empty_final_response=True)`` sets it), an empty response with
``triton_final_response`` true follows the last one. A failure mid-stream answers one error
response (with the final flag when asked) and the stream goes on with the next request.
"""

from __future__ import annotations

import logging
from typing import Any

from edge_agent.core.api import DataPlaneAPI
from edge_agent.core.types import InferRequest
from edge_agent.errors import AgentError
from edge_agent.frontends.grpc import converters, status
from edge_agent.frontends.grpc.generated import grpc_service_pb2 as pb

log = logging.getLogger(__name__)

FINAL = "triton_final_response"
ASK_FINAL = "triton_enable_empty_final_response"


class DecoupledCall:
    """One stream request to a decoupled model, answered by the stream's sender thread."""

    __slots__ = ("_dp", "_msg", "_raw", "_request")

    def __init__(self, dataplane: DataPlaneAPI, msg: pb.ModelInferRequest,
                 request: InferRequest, raw: bool) -> None:
        self._dp, self._msg, self._request, self._raw = dataplane, msg, request, raw

    def _flagged(self, response: pb.ModelInferResponse, final: bool) -> pb.ModelInferResponse:
        response.parameters[FINAL].bool_param = final
        return response

    def _empty(self) -> pb.ModelInferResponse:
        msg = self._msg
        return pb.ModelInferResponse(model_name=msg.model_name, model_version=msg.model_version,
                                     id=msg.id)

    def answer(self, send: Any) -> None:
        """Send every response through ``send`` (``StreamSession.send``: False once the
        stream has ended, which stops the model's generator)."""
        msg, req = self._msg, self._request
        ask_final = ASK_FINAL in msg.parameters and msg.parameters[ASK_FINAL].bool_param
        responses = None
        try:
            responses = self._dp.stream(req)
            for result in responses:
                result = converters.classified(result, msg, self._dp)
                response = converters.to_infer_response(result, raw=self._raw,
                                                         order=req.outputs)
                if not send(pb.ModelStreamInferResponse(
                        infer_response=self._flagged(response, False))):
                    return
        except Exception as exc:
            if not isinstance(exc, AgentError):
                log.exception("decoupled stream inference failed", exc_info=exc)
            send(pb.ModelStreamInferResponse(
                error_message=status.error_message(exc),
                infer_response=self._flagged(self._empty(), True) if ask_final
                else self._empty()))
            return
        finally:
            close = getattr(responses, "close", None)
            if close is not None:
                close()  # stops the generator when the caller went away
        if ask_final:
            send(pb.ModelStreamInferResponse(infer_response=self._flagged(self._empty(), True)))
