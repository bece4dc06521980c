"""The agent's protocol edge: KServe v2 / Triton gRPC messages, converters and the servicer.

Only this package (and :mod:`edge_agent.server`) imports grpc; the serving core never does.
"""
