"""Test layers: everything under tests/unit/ is marked ``unit`` (fast, no bundles, no servers,
fake backends); every other test is marked ``integration`` (real runtimes, bundles, servers).
``pytest -m unit`` runs the fast layer; ``pytest -m integration`` the rest (tests/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

UNIT_DIR = Path(__file__).resolve().parent / "unit"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        unit = UNIT_DIR in Path(item.path).resolve().parents
        item.add_marker(pytest.mark.unit if unit else pytest.mark.integration)
