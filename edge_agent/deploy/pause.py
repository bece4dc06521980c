"""A step hook for crash tests: hold the agent forever right after a named deployment step.

``EDGE_AGENT_TEST_PAUSE_AT=STEP`` in a test agent's environment makes
:func:`hooks_from_environment` (read once, when the agent builds its manager) return a
:class:`PauseAtStep` hook; otherwise it returns none and no deploy step pays for it. The hook
writes ``STATE_DIR/paused-at`` (holding the step name) and sleeps until the test kills the
process, so a test can ``kill -9`` a real agent at each step.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path

from edge_agent.deploy.journal import StepHook
from edge_agent.state import Step

PAUSE_ENV = "EDGE_AGENT_TEST_PAUSE_AT"
PAUSE_FILE = "paused-at"


class PauseAtStep:
    """Blocks the deployment thread forever once ``step`` is recorded."""

    def __init__(self, step: Step, state_dir: Path) -> None:
        self.step = step
        self.marker = Path(state_dir) / PAUSE_FILE

    def __call__(self, deployment_id: int, step: Step) -> None:
        if step is not self.step:
            return
        self.marker.write_text(step.value)
        while True:  # the test kills the process here
            time.sleep(3600)


def hooks_from_environment(state_dir: Path,
                           environ: Mapping[str, str] | None = None) -> list[StepHook]:
    """The step hooks the environment asks for (tests only; normally none)."""
    value = (os.environ if environ is None else environ).get(PAUSE_ENV)
    if not value:
        return []
    return [PauseAtStep(Step(value), state_dir)]
