"""Real signed and unsigned MLP bundles (the management tests' set, built once per session)."""

from __future__ import annotations

import pytest

from tests.support.bundles import Bundles, build_all


@pytest.fixture(scope="session")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> Bundles:
    return build_all(tmp_path_factory.mktemp("embedded-bundles"))
