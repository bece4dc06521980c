"""Session-wide bundles for the parity tests (built once; see bundles.py)."""

from __future__ import annotations

import pytest

from tests.parity.bundles import ParityBundles, build


@pytest.fixture(scope="session")
def parity_bundles(tmp_path_factory: pytest.TempPathFactory) -> ParityBundles:
    return build(tmp_path_factory.mktemp("parity-bundles"))
