"""PyTriton's text classifier (BYTES in, BYTES and FP32 out) as a stub, migrated to
edge_agent.inline line by line (docs/migrate-from-pytriton.md). Serve it::

    python examples/pytriton/text_classifier.py --address 127.0.0.1:8001

Model "text_classifier": input "text" BYTES [-1, 1] (UTF-8), outputs "label" BYTES [-1, 1]
and "score" FP32 [-1, 1]. The stub scores words from two short lists; a real one would run a
tokenizer and a model in the same place.
"""

from __future__ import annotations

import numpy as np

from edge_agent.inline import Tensor, batch, serve_command, signature

POSITIVE = frozenset({"good", "great", "love", "excellent", "happy", "fast"})
NEGATIVE = frozenset({"bad", "awful", "hate", "terrible", "sad", "slow"})


def _classify(text: str) -> tuple[bytes, float]:
    words = [w.strip(".,!?").lower() for w in text.split()]
    score = sum(w in POSITIVE for w in words) - sum(w in NEGATIVE for w in words)
    label = b"positive" if score > 0 else b"negative" if score < 0 else b"neutral"
    return label, float(np.tanh(score))


@signature(inputs=[Tensor(name="text", dtype=np.bytes_, shape=(1,))],
           outputs=[Tensor(name="label", dtype=np.bytes_, shape=(1,)),
                    Tensor(name="score", dtype=np.float32, shape=(1,))],
           max_batch_size=32)
@batch
def classify(text: np.ndarray) -> dict[str, np.ndarray]:
    """One label and score per row of ``text`` (an object array of UTF-8 bytes)."""
    rows = [_classify(row[0].decode("utf-8")) for row in text]
    labels = np.array([[label] for label, _ in rows], dtype=object)
    scores = np.array([[score] for _, score in rows], dtype=np.float32)
    return {"label": labels, "score": scores}


def main(argv: list[str] | None = None) -> None:
    """Serve ``classify`` as model "text_classifier" until Ctrl-C or SIGTERM."""
    serve_command({"text_classifier": classify}, argv, description=__doc__.splitlines()[0])


if __name__ == "__main__":
    main()
