#!/usr/bin/env bash
# Set up (first run) and run the local demo on the embedded default model.
EDGE_EXTRA=all source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
exec python -m examples.demo "$@"
