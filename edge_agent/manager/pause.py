"""A test-only pause at a named deployment step (``EDGE_AGENT_TEST_PAUSE_AT=STEP``).

When set, the manager stops right after recording STEP: it writes ``STATE_DIR/paused-at``
(holding the step name) and sleeps until the process is killed. Crash-safety tests use it to
``kill -9`` a real agent at each step. Unset (always, outside tests), it costs one dict lookup.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

PAUSE_ENV = "EDGE_AGENT_TEST_PAUSE_AT"
PAUSE_FILE = "paused-at"


def maybe_pause(step: str, state_dir: Path) -> None:
    """Block forever at ``step`` when the environment asks for it (tests only)."""
    if os.environ.get(PAUSE_ENV) != step:
        return
    marker = Path(state_dir) / PAUSE_FILE
    marker.write_text(step)
    while True:  # the test kills the process here
        time.sleep(3600)
