#!/usr/bin/env bash
# Smoke test of the terminal UI in a real terminal: runs `edge-console ui ARGS...` under tmux
# (its own tmux server socket), sends keys, checks the captured screen, quits with `q`.
#
#   scripts/tui_smoke.sh --no-discovery --agent 127.0.0.1:1
#   SMOKE_EXPECT='alpha +● online' scripts/tui_smoke.sh --interface 127.0.0.1 --config c.toml
#
# SMOKE_EXPECT: extra lines (extended regexes) that must appear on the fleet screen.
# Exit codes: 0 passed, 1 failed (the last screen is printed), 77 tmux is missing.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
DEADLINE_S="${SMOKE_DEADLINE_S:-30}"
if ! command -v tmux >/dev/null 2>&1; then
    echo "tui_smoke: tmux is not installed (Debian/Ubuntu: apt-get install -y tmux)" >&2
    exit 77
fi

SOCKET="edge-console-smoke-$$"
T=(tmux -L "$SOCKET")
cleanup() { "${T[@]}" kill-server >/dev/null 2>&1 || true; }
trap cleanup EXIT

ENTRY="${SMOKE_ENTRY:-console.cli ui}"  # edge-console ui
# shellcheck disable=SC2086
printf -v CMD '%q ' env "PYTHONPATH=$ROOT" TERM=xterm-256color "$PY" -m $ENTRY "$@"
"${T[@]}" new-session -d -s smoke -x 140 -y 36 "$CMD; sleep 30"

screen() { "${T[@]}" capture-pane -p -t smoke 2>/dev/null || true; }

wait_for() {  # wait_for TEXT [-E]: until TEXT (a regex with -E) is on the screen
    local end=$((SECONDS + DEADLINE_S)) mode="${2:--F}"
    while ! screen | grep -q "$mode" -- "$1"; do
        if ((SECONDS > end)); then
            echo "tui_smoke: FAILED waiting for '$1'; the screen was:" >&2
            screen >&2
            exit 1
        fi
        sleep 0.2
    done
    echo "tui_smoke: ok: '$1'"
}

keys() { "${T[@]}" send-keys -t smoke "$@"; }
escape() { keys Escape; sleep 0.5; }  # a lone ESC: let the terminal parser time it out

wait_for "edge-console"
wait_for "NAME"
wait_for "Filter"
if [[ -n "${SMOKE_EXPECT:-}" ]]; then
    while IFS= read -r line; do
        [[ -n "$line" ]] && wait_for "$line" -E
    done <<< "$SMOKE_EXPECT"
fi

keys "?"                      # help screen
wait_for "Keys follow k9s"
escape
keys ":"                      # jump to the events view
wait_for "Jump to:"
keys -l "events"
keys Enter
wait_for "TIME (UTC)"
escape
keys "/"                      # filter that matches nothing
keys -l "zzz-no-such-agent"
wait_for "no agent matches the filter"
escape
wait_for "agents ·"
keys "q"                      # quit: the shell prints the exit marker
end=$((SECONDS + DEADLINE_S))
while screen | grep -qF "NAME"; do
    if ((SECONDS > end)); then
        echo "tui_smoke: FAILED: the UI did not quit on q" >&2
        screen >&2
        exit 1
    fi
    sleep 0.2
done
echo "tui_smoke: passed"
