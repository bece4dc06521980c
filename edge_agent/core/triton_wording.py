"""Triton's own wording for the errors its clients match on, ahead of the agent's advice.

Triton's client examples (``src/python/examples`` of triton-inference-server/client) check
the text of some errors (``"Request for unknown model" in message``, ``message.startswith(...)``,
``"failed to load" in message``). The agent's messages start with Triton's words and keep
their own explanation after them, so those clients run unchanged and a person still reads
what to do.
"""

from __future__ import annotations


def unknown_model(name: str, version: int | None = None) -> str:
    """Triton's words for a model (or a version of it) the server does not have."""
    which = f"'{name}'" if version is None else f"'{name}' version {version}"
    return f"Request for unknown model: {which} is not found"


def bad_version_string(version: str) -> str:
    """Triton's words for a version that is not a number."""
    return f"failed to get model version from specified version string '{version}'"


def contents_with_raw(tensor: str, model: str) -> str:
    """Triton's words for an input given typed contents while the request has raw contents."""
    return (f"contents field must not be specified when using raw_input_contents for "
            f"'{tensor}' for model '{model}'")


def failed_to_load(name: str) -> str:
    """Triton's words for a load that did not happen."""
    return f"failed to load '{name}'"
