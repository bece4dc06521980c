"""edge-pack: turn one ONNX model into signed, versioned, per-device bundles."""

__version__ = "0.1.0"
