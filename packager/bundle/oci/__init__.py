"""Bundles in OCI registries: ``ref`` (references and the allow list), ``client`` (the registry
HTTP client), ``layout`` (the artifact's media types and annotations), ``transfer`` (push and
pull) and ``head`` (a bundle's manifest read from a registry without its artifacts)."""
