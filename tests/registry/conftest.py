"""Fixtures: a real docker-registry per test module, and the management tests' bundles."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.registry.registry_proc import BINARY, SKIP_REASON, RegistryProcess, running_registry
from tests.support.bundles import Bundles, build_all


@pytest.fixture(scope="session")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> Bundles:
    return build_all(tmp_path_factory.mktemp("registry-bundles"))


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[RegistryProcess]:
    if BINARY is None:
        pytest.skip(SKIP_REASON)
    with running_registry(tmp_path / "registry") as reg:
        yield reg
