"""What the gRPC and HTTP front ends share, free of either wire (no grpc, no HTTP, no protobuf).

:mod:`.context` (the :class:`~.context.FrontendContext` both are given), :mod:`.errors` (the one
error mapping: text and status per :class:`~edge_agent.errors.ErrorCode`), :mod:`.names` (model
name and version parsing), :mod:`.extensions` (the protocol extensions listed in metadata),
:mod:`.control` (repository control rules), :mod:`.tensors` (tensor limits and raw bytes),
:mod:`.shared_memory` (the system shared memory registry) and :mod:`.undecodable` (the one
check for a request that could not be decoded).
"""
