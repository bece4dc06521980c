"""Pipeline steps as a manifest stores them, and their wiring checked against the members'
manifests (at build and at deploy).

``check_wiring`` walks the steps in order, as the agent runs them: each member must have the
inputs and outputs the wiring names, every member input must be wired, datatypes and shapes
(batch dim excluded) must match, and batching must fit. A member that is not known (at build:
no ``--member`` bundle given for it) is skipped, and so is every tensor it produces.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from packager.bundle.errors import ModelError
from packager.bundle.manifest import Manifest, TensorSpec


@dataclass(frozen=True)
class Step:
    """One pipeline step: ``inputs`` maps step input -> pipeline tensor, ``outputs`` maps step
    output -> pipeline tensor."""

    model: str
    version: int | None
    inputs: dict[str, str]
    outputs: dict[str, str]

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "version": self.version, "inputs": dict(self.inputs),
                "outputs": dict(self.outputs)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Step:
        v = d.get("version")
        return cls(str(d["model"]), None if v is None else int(v),
                   {str(k): str(x) for k, x in d["inputs"].items()},
                   {str(k): str(x) for k, x in d["outputs"].items()})


def _shapes_fit(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return len(a) == len(b) and all(x == y or x < 0 or y < 0 for x, y in zip(a, b, strict=True))


def _inner(spec: TensorSpec, batched: bool) -> tuple[int, ...]:
    return spec.shape[1:] if batched else spec.shape


def _match(where: str, what: str, want: TensorSpec, have: TensorSpec, batched: bool) -> None:
    if want.datatype != have.datatype:
        raise ModelError(f"{where}: {what}: datatype {have.datatype} does not match "
                         f"{want.datatype}")
    if not _shapes_fit(_inner(want, batched), _inner(have, batched)):
        raise ModelError(f"{where}: {what}: shape {list(_inner(have, batched))} does not "
                         f"match {list(_inner(want, batched))} (batch dim excluded)")


def step_label(label: str, i: int, step: Step) -> str:
    """``LABEL: step I (model 'M' [version V])`` for messages."""
    where = f"{label}: step {i} (model {step.model!r}"
    return where + (f" version {step.version})" if step.version else ")")


def _check_batching(where: str, manifest: Manifest, member: Manifest) -> None:
    mine, theirs = manifest.batching.max_batch_size, member.batching.max_batch_size
    if mine > 0 and theirs <= 0:
        raise ModelError(f"{where} has no batch dimension, but the pipeline's max_batch_size "
                         f"is {mine}; set it to 0")
    if mine <= 0 < theirs:
        raise ModelError(f"{where} is batched; a pipeline over it needs max_batch_size > 0")
    if mine > 0 and theirs < mine:
        raise ModelError(f"{where} batches at most {theirs} rows, fewer than the pipeline's "
                         f"max_batch_size {mine}")


def check_wiring(label: str, manifest: Manifest, steps: Sequence[Step],
                 member: Callable[[int, Step], Manifest | None]) -> None:
    """ModelError naming the step and tensor when the wiring does not fit the members;
    ``member(i, step)`` gives step ``i``'s manifest, or None when it is not known."""
    known: dict[str, TensorSpec | None] = {t.name: t for t in manifest.inputs}
    batched = manifest.batching.max_batch_size > 0
    for i, step in enumerate(steps, 1):
        where = step_label(label, i, step)
        m = member(i, step)
        if m is None:
            for tensor in step.outputs.values():
                known[tensor] = None
            continue
        _check_batching(where, manifest, m)
        m_in = {t.name: t for t in m.inputs}
        m_out = {t.name: t for t in m.outputs}
        for step_in, tensor in step.inputs.items():
            spec = m_in.get(step_in)
            if spec is None:
                raise ModelError(f"{where} has no input {step_in!r} (its inputs: "
                                 f"{sorted(m_in)})")
            have = known.get(tensor)
            if have is not None:
                _match(where, f"input {step_in!r} <- {tensor!r}", spec, have, batched)
        missing = sorted(set(m_in) - set(step.inputs))
        if missing:
            raise ModelError(f"{where}: its input(s) {missing} are wired to nothing")
        for step_out, tensor in step.outputs.items():
            spec = m_out.get(step_out)
            if spec is None:
                raise ModelError(f"{where} has no output {step_out!r} (its outputs: "
                                 f"{sorted(m_out)})")
            known[tensor] = TensorSpec(tensor, spec.datatype, spec.shape)
    for out in manifest.outputs:
        have = known.get(out.name)
        if have is not None:
            _match(f"{label}: output {out.name!r}", "as produced by its step", out, have,
                   batched)
