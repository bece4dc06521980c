"""Readable rich tables for ``edge-pack inspect`` and ``edge-pack profiles``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from packager.bundle.manifest import Manifest
from packager.bundle.profiles import DeviceProfile


def _shape(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join("?" if d < 0 else str(d) for d in shape) + "]"


def _num(x: object) -> str:
    return f"{x:.3g}" if isinstance(x, float) else "-" if x is None else str(x)


def _instead(m: Manifest) -> str:
    """Why the bundle's backend is not the profile's (ops that backend lacks), or ""."""
    opts = m.backend_options.get(m.backend, {})
    if not opts.get("instead_of"):
        return ""
    return f" (instead of {opts['instead_of']}: {opts.get('instead_reason', '')})"


def render_manifest(m: Manifest, signed: bool, path: Path, console: Console | None = None) -> None:
    """Print a bundle's manifest as a few tables."""
    console = console or Console()
    head = Table(title=f"{path.name}", show_header=False, title_justify="left")
    head.add_column(style="bold")
    head.add_column()
    b = m.batching
    rows = [
        ("model", f"{m.name} version {m.version}"),
        ("profile", f"{m.profile} ({m.arch})"),
        ("backend", f"{m.backend} {m.precision}"
                    + (f", fallback {m.fallback_backend}" if m.fallback_backend else "")
                    + _instead(m)),
        ("signed", "yes" if signed else "NO (unsigned bundle)"),
        ("batching", "unbatched" if b.max_batch_size == 0 else
         f"max {b.max_batch_size}, preferred {list(b.preferred_batch_sizes)}, "
         f"queue delay {b.max_queue_delay_us} us, instances {b.instances}"),
        ("source", f"{m.source_name} sha256 {m.source_sha256[:16]}..."),
        ("created", m.created),
        ("toolchain", ", ".join(f"{k} {v}" for k, v in sorted(m.toolchain.items()))),
        ("format", str(m.format_version)),
    ]
    if not m.warmup or m.decoupled:
        rows.append(("serving", ", ".join(
            [*(["never warmed up or probed (warmup = false)"] if not m.warmup else []),
             *(["decoupled (responses stream over ModelStreamInfer)"] if m.decoupled else [])])))
    if m.sequence is not None:
        q = m.sequence
        rows.append(("sequence", ", ".join(
            [f"stateful: {q.strategy}, {q.max_candidate_sequences} slots, idle "
             f"{q.max_sequence_idle_us} us",
             *(f"{c.kind} -> {c.name} {c.datatype}" for c in q.control_inputs),
             *(f"state {t.input_name} <- {t.output_name}" for t in q.states)])))
    for k, v in rows:
        head.add_row(k, v)
    console.print(head)

    io = Table(title="IO signature", title_justify="left")
    for col in ("", "name", "datatype", "shape"):
        io.add_column(col)
    for kind, specs in (("input", m.inputs), ("output", m.outputs)):
        for t in specs:
            io.add_row(kind, t.name, t.datatype, _shape(t.shape))
    console.print(io)

    art = Table(title="artifacts", title_justify="left")
    for col in ("backend", "entry", "options"):
        art.add_column(col)
    for backend, entry in sorted(m.artifacts.items()):
        opts = m.backend_options.get(backend, {})
        data = m.external_data.get(backend, ())
        art.add_row(backend, entry + "".join(f"\n+ {d.rpartition('/')[2]} (weights)"
                                             for d in data),
                    ", ".join(f"{k}={v}" for k, v in sorted(opts.items())))
    console.print(art)

    par = Table(title=f"parity ({'passed' if m.parity.get('passed') else 'FAILED'})",
                title_justify="left")
    for col in ("artifact", "batch sizes", "max abs err", "max rel err", "top-1", "ok"):
        par.add_column(col)
    for backend, rep in sorted(m.parity.get("artifacts", {}).items()):
        par.add_row(backend, str(rep.get("batch_sizes")), _num(rep.get("max_abs_error")),
                    _num(rep.get("max_rel_error")), _num(rep.get("top1_agreement")),
                    "yes" if rep.get("passed") else "NO")
    for backend, why in sorted(m.parity.get("skipped", {}).items()):
        par.add_row(backend, "-", "-", "-", "-", f"skipped: {why}")
    console.print(par)
    console.print(f"reference data for the device's parity check: {reference_line(m.parity)}")

    files = Table(title="files", title_justify="left")
    for col in ("path", "bytes", "sha256"):
        files.add_column(col)
    for f in m.files:
        files.add_row(f.path, str(f.size), f.sha256[:16] + "...")
    console.print(files)


def render_profiles(profiles: list[DeviceProfile], console: Console | None = None) -> None:
    """Print the device profiles as one table."""
    console = console or Console()
    t = Table(title="device profiles", title_justify="left", box=box.SIMPLE_HEAD)
    t.add_column("name", no_wrap=True)
    t.add_column("target")
    t.add_column("batching")
    t.add_column("parity tolerance")
    for p in profiles:
        b = p.batching
        fallback = f", fallback {p.fallback_backend}" if p.fallback_backend else ""
        t.add_row(p.name, f"{p.arch} {p.backend} {p.precision}{fallback}",
                  f"max {b.max_batch_size}, preferred {'/'.join(map(str, b.preferred_batch_sizes))}"
                  f", delay {b.max_queue_delay_us} us, {b.instances} instance(s)",
                  f"atol {p.parity.atol:g}, rtol {p.parity.rtol:g}")
    console.print(t)
    for p in profiles:
        if p.description:
            console.print(f"  [bold]{p.name}[/bold]: {p.description}", highlight=False)
    console.print("int8: CNNs want static quantization (--calibration-data; ONNX Runtime or "
                  "OpenVINO int8 profile); without it ONNX Runtime int8 is dynamic "
                  "quantization, which pays off for MatMul-heavy models (MLPs, transformers) "
                  "only (docs/quantization.md)", highlight=False)


def reference_line(parity: dict[str, Any]) -> str:
    """What reference data a bundle carries (``parity.reference``), in one line."""
    ref = parity.get("reference")
    if not ref:
        return "none (built before edge-pack stored it; devices skip the check)"
    if "omitted" in ref:
        return f"none ({ref['omitted']})"
    return (f"{ref.get('file')}: {ref.get('origin')} inputs at batch sizes "
            f"{ref.get('batch_sizes')}, {ref.get('bytes')} bytes")
