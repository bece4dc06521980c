"""``edge-agent check BUNDLE``: the device parity check offline, in a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.parity.bundles import ParityBundles


def _check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "edge_agent", "check", *args],
                          capture_output=True, text=True, timeout=300)


def test_an_honest_bundle_passes(parity_bundles: ParityBundles) -> None:
    proc = _check(str(parity_bundles.good[1]), "--trust", str(parity_bundles.public_key))
    assert proc.returncode == 0, proc.stderr
    assert "signed by trusted key" in proc.stdout
    assert "parity on this device PASSED" in proc.stdout and "max abs error" in proc.stdout


def test_a_resigned_bundle_with_wrong_numbers_fails_with_its_figures(
        parity_bundles: ParityBundles) -> None:
    proc = _check(str(parity_bundles.tampered), "--trust", str(parity_bundles.public_key),
                  "--json")
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert report["passed"] is False and report["max_abs_error"] > 0.01
    assert report["batch_sizes"] == [1, 4]
    assert "disagrees with the source model" in report["message"]


def test_an_old_bundle_is_not_checked_and_says_so(parity_bundles: ParityBundles) -> None:
    proc = _check(str(parity_bundles.old_format))
    assert proc.returncode == 0, proc.stderr
    assert "NOT CHECKED" in proc.stdout and "no reference data" in proc.stdout
    assert "signature not checked" in proc.stdout


def test_an_untrusted_signature_is_one_clear_error(parity_bundles: ParityBundles,
                                                  tmp_path: Path) -> None:
    from packager.bundle.signing import generate_keypair

    _, other = generate_keypair(tmp_path / "other")
    proc = _check(str(parity_bundles.good[1]), "--trust", str(other))
    assert proc.returncode == 1
    assert proc.stderr.startswith("edge-agent check: error:")
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stdout == ""


def test_a_missing_bundle_is_one_clear_error(tmp_path: Path) -> None:
    proc = _check(str(tmp_path / "nope.edgepkg"))
    assert proc.returncode == 1 and "edge-agent check: error:" in proc.stderr
