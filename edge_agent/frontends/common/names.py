"""Model name and version as a request gives them (both protocols: strings)."""

from __future__ import annotations

from edge_agent.core.triton_wording import bad_version_string
from edge_agent.errors import InvalidInputError


def model_name(name: str) -> str:
    """``name`` when given; InvalidInputError for an empty one."""
    if not name:
        raise InvalidInputError("empty request: model name is missing")
    return name


def parse_version(version: str, model: str) -> int | None:
    """A request's version string: "" means the active version; otherwise a positive integer."""
    if not version:
        return None
    try:
        value = int(version)
    except ValueError:
        value = -1
    if value < 1:
        raise InvalidInputError(
            f"{bad_version_string(version)}; model '{model}': version {version!r} is not a "
            "version number; "
            "use a positive integer or leave it empty for the active version")
    return value
