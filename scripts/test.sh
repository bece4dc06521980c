#!/usr/bin/env bash
# Set up (first run) and run the whole test suite: lint, type check, then pytest.
source "$(dirname "${BASH_SOURCE[0]}")/system-deps.sh"
EDGE_EXTRA=dev source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
echo "==> ruff"
ruff check .
echo "==> mypy"; mypy
echo "==> pytest"
# Exit code 5 (no tests collected) is a failure here on purpose.
exec python -m pytest -q -ra "$@"
