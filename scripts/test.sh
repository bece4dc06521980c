#!/usr/bin/env bash
# Set up (first run) and run the whole test suite: lint, type check, pytest, then (as root, on
# the whole suite) the two checks on real targets: arm64 under qemu-user and the unit under a
# real systemd (each skips with the reason where this machine cannot run it).
source "$(dirname "${BASH_SOURCE[0]}")/system-deps.sh"
EDGE_EXTRA=dev source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
echo "==> ruff"
ruff check .
echo "==> mypy"; mypy
echo "==> pytest"
# Exit code 5 (no tests collected) is a failure here on purpose.
python -m pytest -q -ra "$@"
# Arguments mean a targeted run: the target checks belong to the whole suite only.
# EDGE_SKIP_TARGET_CHECKS=1 leaves them out (they take ~20 min on a fresh machine, ~3 min cached).
if [ $# -eq 0 ] && [ "${EDGE_SKIP_TARGET_CHECKS:-0}" != 1 ]; then
    if [ "$(id -u)" = 0 ]; then
        echo "==> arm64 under qemu-user (scripts/arm64-check.sh)"
        bash scripts/arm64-check.sh --if-possible
        echo "==> the unit under a real systemd (scripts/systemd-check.sh)"
        bash scripts/systemd-check.sh --if-possible
    else
        echo "note: the arm64 and systemd checks need root: sudo scripts/arm64-check.sh," \
             "sudo scripts/systemd-check.sh"
    fi
fi
