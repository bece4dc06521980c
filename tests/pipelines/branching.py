"""Python models for the tests of branching pipelines and asynchronous/streaming BLS.

``meet_a`` and ``meet_b`` prove that two calls run at the same time: each announces itself
(a file named after the run, ``X[1]``) and waits for the other's announcement, so two calls
made one after the other never meet (the first fails after its wait).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.pipelines.conftest import Built, build

SOURCE = textwrap.dedent('''
    import os
    import time

    import numpy as np


    def _meet(x, tag):
        run = int(np.asarray(x).reshape(-1)[1])
        open(os.path.join(MEET, "%d-%d" % (run, tag)), "w").close()
        other = os.path.join(MEET, "%d-%d" % (run, 1 - tag))
        deadline = time.monotonic() + 60
        while not os.path.exists(other):
            if time.monotonic() > deadline:
                raise RuntimeError("branch %d of run %d ran alone" % (tag, run))
            time.sleep(0.005)
        return x * (tag + 2)


    def meet_a(inputs, ctx):
        return {"Y": _meet(inputs["X"], 0)}


    def meet_b(inputs, ctx):
        return {"Y": _meet(inputs["X"], 1)}


    def add(inputs, ctx):
        return {"Y": inputs["A"] + inputs["B"]}


    def double(inputs, ctx):
        return {"Y": inputs["X"] * 2}


    def slow(inputs, ctx):
        time.sleep(0.3)
        return {"Y": inputs["X"]}


    def fan(inputs, ctx):
        """Both children started before either is awaited."""
        x = inputs["X"]
        a = ctx.infer_async("meet_a", {"X": x})
        b = ctx.infer_async("meet_b", {"X": x})
        return {"Y": a.result()["Y"] + b.result()["Y"]}


    def gather(inputs, ctx):
        """fan, in async code: both children awaited through asyncio.wrap_future."""
        import asyncio

        x = inputs["X"]

        async def both():
            a = asyncio.wrap_future(ctx.infer_async("meet_a", {"X": x}))
            b = asyncio.wrap_future(ctx.infer_async("meet_b", {"X": x}))
            done = await asyncio.wait_for(asyncio.gather(a, b), 60)
            return done[0]["Y"] + done[1]["Y"]

        return {"Y": asyncio.run(both())}


    def listen(inputs, ctx):
        """The sum of the decoupled child's responses."""
        total = np.zeros_like(inputs["X"])
        for response in ctx.stream("count", {"X": inputs["X"]}):
            total = total + response["Y"]
        return {"Y": total}


    def patient(inputs, ctx):
        """Ten calls to the slow child, one after the other, whatever each answers."""
        for _ in range(10):
            try:
                ctx.infer("slow", {"X": inputs["X"]})
            except Exception:
                pass
        return {"Y": inputs["X"]}


    def patient_stream(inputs, ctx):
        """patient, decoupled: its one response after ten calls to the slow child."""
        yield patient(inputs, ctx)


    def ticker(inputs, ctx):
        """Up to 50 responses, 20 ms apart; how many it produced is written when it ends."""
        x = inputs["X"]
        produced = 0
        try:
            for i in range(50):
                produced += 1
                yield {"Y": x + i}
                time.sleep(0.02)
        finally:
            path = os.path.join(MEET, "ticker-%d" % int(x.reshape(-1)[1]))
            with open(path + ".tmp", "w") as f:
                f.write(str(produced))
            os.replace(path + ".tmp", path)


    def first(inputs, ctx):
        """The decoupled child's first response; the loop is left at once."""
        for response in ctx.stream("ticker", {"X": inputs["X"]}):
            return {"Y": response["Y"]}


    def count(inputs, ctx):
        x = inputs["X"]
        for i in range(int(x.reshape(-1)[0])):
            yield {"Y": x + i}
    ''')


def tensors(inputs: tuple[str, ...], outputs: tuple[str, ...]) -> str:
    """The ``[[inputs]]`` and ``[[outputs]]`` tables of a spec, each FP32 [4]."""
    return "".join(f'[[{kind}]]\nname = "{n}"\ndatatype = "FP32"\nshape = [4]\n'
                   for kind, names in (("inputs", inputs), ("outputs", outputs))
                   for n in names)


def spec(directory: Path, name: str, entry: str, inputs: tuple[str, ...] = ("X",),
         extra: str = "") -> Path:
    """An unbatched Python model ``name`` over FP32 [4] ``inputs`` -> ``Y`` FP32 [4]."""
    path = directory / f"{name}.toml"
    path.write_text(f'name = "{name}"\nkind = "python"\nsource = ["branching_models.py"]\n'
                    f'entry = "branching_models:{entry}"\nmax_batch_size = 0\n{extra}\n'
                    + tensors(inputs, ("Y",)))
    return path


def bundles(directory: Path, built: Built, meet: Path,
            models: dict[str, tuple[str, tuple[str, ...], str]]) -> list[Path]:
    """Signed bundles of ``models`` (name -> entry, inputs, extra spec lines); ``meet`` is
    where the meeting models announce themselves."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "branching_models.py").write_text(f"MEET = {str(meet)!r}\n" + SOURCE)
    return [build(spec(directory, name, entry, inputs, extra), 1, directory / "out",
                  built.private_key) for name, (entry, inputs, extra) in models.items()]
