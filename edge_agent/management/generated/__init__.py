"""Generated edge.agent.v1 stubs. DO NOT EDIT.

Regenerate: ``python -m edge_agent.management.regen``. grpcio-tools 1.71.2.
"""
