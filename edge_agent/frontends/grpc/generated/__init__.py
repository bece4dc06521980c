"""Generated KServe v2 stubs.

Regenerate: ``python -m edge_agent.frontends.grpc.regen``.

DO NOT EDIT. grpcio-tools 1.71.2. The modules here register their descriptors in
``POOL`` (a private pool), so they coexist with tritonclient's copies of the same messages.
"""

from google.protobuf import descriptor_pool

POOL = descriptor_pool.DescriptorPool()
