"""Reading an input from system shared memory: ``pread`` per request vs a region mapped once.

    python -m benchmarks.bench_shm_read --rounds 5 --seconds 1

In process, one thread, the squeezenet input (1x3x224x224 FP32, 602 KB) and the MLP's (256 B):

* registry  - ``SharedMemoryRegistry.read_input`` as served (size check, ``preadv`` into a
  fresh array)
* pread     - ``os.preadv`` alone into a fresh array
* mmap copy - a mapping made once, ``fstat`` size check, copy into a fresh array (what a mapped
  region would do per request; NOT safe: the client can truncate between the check and the
  copy, and the copy then faults with SIGBUS)
* mmap view - a zero-copy ``np.frombuffer`` view of the mapping (the ceiling; no copy at all)

Rounds interleave the variants; each figure is the median of the rounds, in microseconds of
CPU per read.

    python -m benchmarks.bench_shm_read --race

shows why "mmap copy" is not kept: a child process copies from its mapping after an ``fstat``
check, in a loop, while this process truncates and restores the object; the child dies of
SIGBUS (exit -7) within a second, where ``pread`` returns a short count.
"""

from __future__ import annotations

import argparse
import mmap
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable

import numpy as np

from edge_agent.frontends.common.shared_memory import Callers, SharedMemoryRegistry

SHAPES = {"squeezenet": (1, 3, 224, 224), "mlp": (1, 64)}


def _cpu_per_call(fn: Callable[[], object], seconds: float) -> float:
    """CPU microseconds per call of ``fn``, called for ``seconds`` of wall time."""
    n, c0, end = 0, time.process_time(), time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(32):
            fn()
        n += 32
    return (time.process_time() - c0) / n * 1e6


def variants(fd: int, shape: tuple[int, ...], registry: SharedMemoryRegistry,
             name: str) -> tuple[dict[str, Callable[[], object]], mmap.mmap]:
    """The read variants over one object (its descriptor ``fd``, registered as ``name``)."""
    count = int(np.prod(shape))
    nbytes = count * 4
    mapped = mmap.mmap(fd, nbytes, prot=mmap.PROT_READ)
    dtype = np.dtype(np.float32)
    ref = (name, 0, nbytes)

    def registry_read() -> object:
        return registry.read_input(ref, "x", dtype, list(shape))

    def pread() -> object:
        out = np.empty(shape, np.float32)
        os.preadv(fd, [out.data.cast("B")], 0)
        return out

    view = np.frombuffer(mapped, np.float32, count).reshape(shape)

    def mmap_copy() -> object:
        if os.fstat(fd).st_size < nbytes:
            raise ValueError("truncated")
        out = np.empty(shape, np.float32)
        np.copyto(out, view)
        return out

    def mmap_view() -> object:
        return np.frombuffer(mapped, np.float32, count).reshape(shape)

    return {"registry": registry_read, "pread": pread, "mmap copy": mmap_copy,
            "mmap view": mmap_view}, mapped


def _race_reader(path: str, nbytes: int, seconds: float) -> None:
    """Copy from a mapping of ``path`` after an fstat check, for ``seconds``."""
    fd = os.open(path, os.O_RDONLY)
    deadline = time.monotonic() + 30
    while True:  # the other side may have it truncated right now
        try:
            mapped = mmap.mmap(fd, nbytes, prot=mmap.PROT_READ)
            break
        except ValueError:
            if time.monotonic() > deadline:
                raise
    view = np.frombuffer(mapped, np.uint8, nbytes)
    out = np.empty(nbytes, np.uint8)
    copies, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        if os.fstat(fd).st_size >= nbytes:
            np.copyto(out, view)
            copies += 1
    print(f"reader survived {copies} copies")


def race(seconds: float = 10.0) -> int:
    """The truncation race against a guarded mapping; the reader's exit code."""
    nbytes = 602112
    path = f"/dev/shm/bench_shm_race_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    with open(path, "wb") as f:
        f.truncate(nbytes)
    fd = os.open(path, os.O_RDWR)
    child = subprocess.Popen([sys.executable, "-m", "benchmarks.bench_shm_read", "--reader",
                              path, "--seconds", str(seconds)])
    truncations = 0
    try:
        while child.poll() is None:
            os.ftruncate(fd, 0)
            os.ftruncate(fd, nbytes)
            truncations += 1
    finally:
        child.kill()
        child.wait()
        os.close(fd)
        os.unlink(path)
    print(f"reader exit code {child.returncode} (-7: SIGBUS) after {truncations} truncations")
    return child.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.0, help="per variant and round")
    parser.add_argument("--race", action="store_true", help="the truncation race (above)")
    parser.add_argument("--reader", metavar="PATH", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.reader:
        _race_reader(args.reader, 602112, args.seconds)
        return 0
    if args.race:
        race()
        return 0
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    registry = SharedMemoryRegistry()
    for model, shape in SHAPES.items():
        name = f"bench_shm_read_{os.getpid()}_{uuid.uuid4().hex[:6]}"
        nbytes = int(np.prod(shape)) * 4
        path = f"/dev/shm/{name}"
        with open(path, "wb") as f:
            f.write(np.random.default_rng(0).random(shape, dtype=np.float32).tobytes())
        fd = os.open(path, os.O_RDONLY)
        try:
            registry.register(name, f"/{name}", 0, nbytes, Callers.agent("bench"))
            runs, mapped = variants(fd, shape, registry, name)
            reference = runs["pread"]()
            for label, fn in runs.items():  # every variant reads the same bytes
                assert np.array_equal(np.asarray(fn()), np.asarray(reference)), label
            figures: dict[str, list[float]] = {label: [] for label in runs}
            for _ in range(args.rounds):
                for label, fn in runs.items():
                    figures[label].append(_cpu_per_call(fn, args.seconds))
            print(f"{model} input, {nbytes} bytes: " + ", ".join(
                f"{label} {statistics.median(v):.1f} us" for label, v in figures.items()))
            del runs, fn  # the closures hold views of the mapping
            mapped.close()
        finally:
            registry.unregister(name)
            os.close(fd)
            os.unlink(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
