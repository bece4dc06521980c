"""edge-agent: the on-device service that serves model versions over KServe v2 gRPC."""

__version__ = "0.1.0"
