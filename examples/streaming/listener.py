"""A streaming "listener": a stateful, decoupled Python model in the shape of streaming speech
recognition. Each request of a sequence carries the next chunk of one audio signal (any
length); the model cuts the signal into frames of FRAME samples, carrying the samples of an
unfinished frame over to the next chunk in ``ctx.state``, and answers one response per frame
completed: the frame's number, its RMS level and the transcript so far (one character per
frame: ``#`` loud, ``-`` quiet). The sequence's last request (END) also flushes a last,
shorter frame. A chunk that completes no frame gets no response, only the final flag.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

FRAME = 160  # samples per frame (10 ms at 16 kHz)
LOUD = 0.1  # RMS above which a frame is "#"


def frames(signal: np.ndarray) -> list[float]:
    """The RMS level of each frame of a whole ``signal`` (a last short frame included): what
    the streamed responses of one sequence add up to, computed offline."""
    return [_rms(signal[i:i + FRAME]) for i in range(0, len(signal), FRAME)]


def transcript(levels: list[float]) -> str:
    return "".join("#" if level > LOUD else "-" for level in levels)


def _rms(samples: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(samples, dtype=np.float64))))


def listen(inputs: dict[str, np.ndarray], ctx: Any) -> Iterator[dict[str, np.ndarray]]:
    """AUDIO (FP32 [n]) -> one response per frame completed: FRAME (INT64 [1]), LEVEL (FP32
    [1]), TEXT (BYTES [1], the transcript so far)."""
    state = ctx.state
    pending = np.concatenate([state.get("pending", np.zeros(0, np.float32)),
                              inputs["AUDIO"].astype(np.float32).reshape(-1)])
    levels: list[float] = state.setdefault("levels", [])
    while len(pending) >= FRAME or (ctx.sequence_end and len(pending)):
        frame, pending = pending[:FRAME], pending[FRAME:]
        levels.append(_rms(frame))
        yield {"FRAME": np.array([len(levels) - 1], np.int64),
               "LEVEL": np.array([levels[-1]], np.float32),
               "TEXT": np.array([transcript(levels).encode()], dtype=object)}
    state["pending"] = pending
