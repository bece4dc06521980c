"""Pipeline steps as a manifest stores them, the graph they form, and their wiring checked
against the members' manifests (at build and at deploy).

The steps form a DAG: a step depends on the steps that produce the tensors it reads (its inputs
and its ``when`` condition's tensor), in whatever order the spec lists them; :func:`step_order`
gives an order that runs every step after those it depends on, or refuses a cycle naming its
steps. ``check_wiring`` walks the steps in that order: each member must have the
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

CONDITION_OPS = ("==", "!=", ">", ">=", "<", "<=")
"""The comparisons a step's ``when`` may make."""


@dataclass(frozen=True)
class StepCondition:
    """A step's ``when``: the step runs only when every element of pipeline tensor ``tensor``
    compares ``op`` to ``value`` (an empty tensor never does). A plain comparison, never code."""

    tensor: str
    op: str
    value: float | int | bool

    def __post_init__(self) -> None:
        if self.op not in CONDITION_OPS:
            raise ModelError(f"condition op {self.op!r} is not one of {list(CONDITION_OPS)}")
        if not isinstance(self.value, (int, float)):
            raise ModelError(f"condition value {self.value!r} is not a number or a boolean")

    def __str__(self) -> str:
        return f"{self.tensor} {self.op} {self.value!r}"

    def to_dict(self) -> dict[str, Any]:
        return {"tensor": self.tensor, "op": self.op, "value": self.value}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StepCondition:
        value = d["value"]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            value = bool(value) if isinstance(value, bool) else float(value)
        return cls(str(d["tensor"]), str(d["op"]), value)


@dataclass(frozen=True)
class Step:
    """One pipeline step: ``inputs`` maps step input -> pipeline tensor, ``outputs`` maps step
    output -> pipeline tensor; ``when`` (None: always) makes it optional."""

    model: str
    version: int | None
    inputs: dict[str, str]
    outputs: dict[str, str]
    when: StepCondition | None = None

    @property
    def reads(self) -> list[str]:
        """The pipeline tensors the step needs before it runs (its inputs, its condition's)."""
        tensors = list(self.inputs.values())
        if self.when is not None and self.when.tensor not in tensors:
            tensors.append(self.when.tensor)
        return tensors

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"model": self.model, "version": self.version,
                             "inputs": dict(self.inputs), "outputs": dict(self.outputs)}
        if self.when is not None:  # absent otherwise: older readers see the same steps
            d["when"] = self.when.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Step:
        v = d.get("version")
        when = d.get("when")
        return cls(str(d["model"]), None if v is None else int(v),
                   {str(k): str(x) for k, x in d["inputs"].items()},
                   {str(k): str(x) for k, x in d["outputs"].items()},
                   None if when is None else StepCondition.from_dict(when))


def producers(steps: Sequence[Step]) -> dict[str, int]:
    """Pipeline tensor -> the index of the step that writes it."""
    return {t: i for i, s in enumerate(steps) for t in s.outputs.values()}


def dependencies(steps: Sequence[Step]) -> list[set[int]]:
    """For each step, the indexes of the steps whose outputs it reads (pipeline inputs and
    tensors nothing writes are not steps)."""
    made = producers(steps)
    return [{made[t] for t in s.reads if t in made} for s in steps]


def step_order(steps: Sequence[Step], name: Callable[[int], str] | None = None) -> list[int]:
    """The step indexes in an order that runs each step after every step it reads from;
    ModelError naming the steps of a cycle (``name(i)`` labels step ``i``)."""
    label = name or (lambda i: f"step {i + 1} (model {steps[i].model!r})")
    deps = dependencies(steps)
    order: list[int] = []
    state = [0] * len(steps)  # 0 unseen, 1 on the current path, 2 placed
    for root in range(len(steps)):
        if state[root]:
            continue
        path: list[int] = [root]
        todo: list[list[int]] = [sorted(deps[root])]
        state[root] = 1
        while path:
            if todo[-1]:
                nxt = todo[-1].pop(0)
                if state[nxt] == 1:
                    cycle = [*path[path.index(nxt):], nxt]
                    raise ModelError("the steps form a cycle: " + " -> ".join(
                        label(i) for i in cycle) + " (each reads what the next "
                        "writes); a pipeline's steps must form a DAG")
                if state[nxt] == 0:
                    state[nxt] = 1
                    path.append(nxt)
                    todo.append(sorted(deps[nxt]))
                continue
            done = path.pop()
            todo.pop()
            state[done] = 2
            order.append(done)
    return order


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


def _check_condition(where: str, when: StepCondition, known: dict[str, TensorSpec | None],
                     batched: bool) -> None:
    if batched:
        raise ModelError(f"{where}: a condition (when) decides for a whole execution, and "
                         "the rows of different requests batched together would decide for "
                         "each other; set the pipeline's max_batch_size = 0")
    if when.tensor not in known:
        raise ModelError(f"{where}: its condition reads {when.tensor!r}, which no pipeline "
                         "input or step produces")
    have = known[when.tensor]
    if have is not None and have.datatype in ("BYTES", "STRING"):
        raise ModelError(f"{where}: its condition compares {when.tensor!r}, a "
                         f"{have.datatype} tensor, to a number; condition on a numeric tensor")


def check_wiring(label: str, manifest: Manifest, steps: Sequence[Step],
                 member: Callable[[int, Step], Manifest | None]) -> None:
    """ModelError naming the step and tensor when the wiring does not fit the members;
    ``member(i, step)`` gives step ``i``'s manifest, or None when it is not known."""
    known: dict[str, TensorSpec | None] = {t.name: t for t in manifest.inputs}
    batched = manifest.batching.max_batch_size > 0
    try:
        order = step_order(steps)
    except ModelError as exc:
        raise ModelError(f"{label}: {exc}") from None
    for index in order:
        i, step = index + 1, steps[index]
        where = step_label(label, i, step)
        if step.when is not None:
            _check_condition(where, step.when, known, batched)
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
