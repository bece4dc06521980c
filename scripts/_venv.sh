# Sourced by scripts/demo.sh and scripts/test.sh: create .venv on first use and install the project
# with the extra the caller names in EDGE_EXTRA: "all" (the demo: agent, OpenVINO, console,
# packager) or "dev" (the tests: all of that plus the test tools). See README "Install".
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${EDGE_VENV:-$ROOT/.venv}"
PY="${PYTHON:-python3}"
EXTRA="${EDGE_EXTRA:-dev}"
stamp="$VENV/.edge-installed"  # holds the extra installed last
if [ ! -x "$VENV/bin/python" ]; then
    echo "==> creating virtual environment in $VENV"
    "$PY" -m venv "$VENV"
fi
installed="$(cat "$stamp" 2>/dev/null || true)"
# Reinstall when pyproject.toml changed since the last install, or when the caller needs more
# than is installed (dev holds all).
if [ ! -f "$stamp" ] || [ "$ROOT/pyproject.toml" -nt "$stamp" ] \
        || { [ "$installed" != "$EXTRA" ] && [ "$installed" != dev ]; }; then
    echo "==> installing edgeship[$EXTRA] and its dependencies (first run takes a minute)"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    # this checkout installed under its old distribution name (edge-toolkit, taken on PyPI by
    # another project): remove it, and the grpcio-tools its [dev] pinned (it needs protobuf>=7,
    # the newest tritonclient <7; the stubs now compile in a venv of their own)
    if "$VENV/bin/python" - "$ROOT" <<'PY'
import importlib.metadata as md, json, pathlib, sys
try:
    url = json.loads(md.distribution("edge-toolkit").read_text("direct_url.json") or "{}")
except md.PackageNotFoundError:
    sys.exit(1)
sys.exit(0 if url.get("url") == pathlib.Path(sys.argv[1]).as_uri() else 1)
PY
    then
        "$VENV/bin/python" -m pip uninstall -qq --yes edge-toolkit grpcio-tools
    fi
    "$VENV/bin/python" -m pip install --quiet -e "$ROOT[$EXTRA]"
    echo "$EXTRA" > "$stamp"
fi
export PATH="$VENV/bin:$PATH"
cd "$ROOT"
