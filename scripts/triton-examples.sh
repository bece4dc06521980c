#!/usr/bin/env bash
# Run Triton's example clients (src/python/examples of triton-inference-server/client, fetched
# separately) unmodified against a local agent and print a pass/fail table:
#   scripts/triton-examples.sh EXAMPLES_DIR [--strict] [--timeout S] [--workdir DIR]
# (benchmarks/triton_examples.py; docs/compatibility.md records a run)
EDGE_EXTRA=dev source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
exec python -m benchmarks.triton_examples "$@"
