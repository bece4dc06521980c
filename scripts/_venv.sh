# Sourced by scripts/demo.sh and scripts/test.sh: create .venv on first use and install the project.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${EDGE_VENV:-$ROOT/.venv}"
PY="${PYTHON:-python3}"
stamp="$VENV/.edge-installed"
if [ ! -x "$VENV/bin/python" ]; then
    echo "==> creating virtual environment in $VENV"
    "$PY" -m venv "$VENV"
fi
# Reinstall when pyproject.toml changed since the last install.
if [ ! -f "$stamp" ] || [ "$ROOT/pyproject.toml" -nt "$stamp" ]; then
    echo "==> installing edge-toolkit and its dependencies (first run takes a minute)"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --quiet -e "$ROOT[dev]"
    touch "$stamp"
fi
export PATH="$VENV/bin:$PATH"
cd "$ROOT"
