"""The agent's front ends: KServe v2 gRPC (:mod:`.grpc`) and HTTP/REST (:mod:`.http`).

Both are given one :class:`edge_agent.frontends.common.context.FrontendContext` (data plane,
shared-memory registry, limits, server metadata) and share :mod:`.common` (extension lists,
shared memory, name/version parsing, the one error mapping). Neither imports the other.
"""
