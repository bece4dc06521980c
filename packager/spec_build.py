"""Build bundles from a model spec (packager/spec.py): Python-function models and pipelines.

A Python model's bundle carries its source files under ``code/`` (hashed in the manifest, so
the signature covers them); ``artifacts.python`` names the entry module's file and
``backend_options.python`` the entry, requirements and flags. A pipeline's bundle carries
``pipeline.json`` (the steps); ``backend_options.pipeline.steps`` repeats them so that the
manifest alone describes the wiring. Staged in a temp dir, renamed into place at the end:
nothing is written to ``out_dir`` on any failure.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import shutil
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from packager import __version__
from packager.bundle.errors import UsageError
from packager.bundle.format import CODE_DIR, bundle_filename, sha256_file
from packager.bundle.function_signature import CALLING_CONTEXT
from packager.bundle.manifest import BatchingConfig, Manifest
from packager.bundle.pipeline import Step, check_wiring
from packager.bundle.profiles import DeviceProfile
from packager.bundle.signing import load_private_key
from packager.bundle.writer import write_bundle
from packager.labels import write_label_files
from packager.spec import ModelSpec, load_spec
from packager.staging import load_profiles, open_stage, publish

PIPELINE_FILE = "pipeline.json"


def _batching(profile: DeviceProfile, spec: ModelSpec) -> BatchingConfig:
    b = profile.batching
    # a stateful model's ctx.state lives in its one instance
    instances = 1 if spec.sequence is not None else spec.instances or b.instances
    if spec.max_batch_size <= 0:
        return dataclasses.replace(b, max_batch_size=0, preferred_batch_sizes=(),
                                   max_queue_delay_us=0, instances=instances)
    preferred = tuple(p for p in b.preferred_batch_sizes if p <= spec.max_batch_size)
    return dataclasses.replace(b, max_batch_size=spec.max_batch_size,
                               preferred_batch_sizes=preferred, instances=instances)


def _created() -> tuple[str, int]:
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    ts = int(epoch) if epoch and epoch.isdigit() else int(time.time())
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), ts


def _stage_files(spec: ModelSpec, root: Path) -> tuple[dict[str, str], dict[str, Any]]:
    """Copy what the bundle carries under ``root``; return (artifacts, backend_options)."""
    if spec.kind == "python":
        for rel in spec.sources:
            dest = root / CODE_DIR / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(spec.path.parent / rel, dest)
        module = spec.entry.split(":")[0]
        entry_file = f"{CODE_DIR}/{Path(*module.split('.')).with_suffix('.py').as_posix()}"
        opts = {"entry": spec.entry, "requires": list(spec.requires),
                "sources": [f"{CODE_DIR}/{s.as_posix()}" for s in spec.sources]}
        if spec.calling != CALLING_CONTEXT:  # written only when set: other bundles keep their bytes
            opts["calling"] = spec.calling
        return {"python": entry_file}, {"python": opts}
    steps = [s.to_dict() for s in spec.steps]
    (root / PIPELINE_FILE).write_text(json.dumps({"steps": steps}, indent=2, sort_keys=True),
                                      encoding="utf-8")
    return {"pipeline": PIPELINE_FILE}, {"pipeline": {"steps": steps}}


def _build_one(spec: ModelSpec, profile: DeviceProfile, version: int, stage: Path,
               key: Any) -> Path:
    root = stage / profile.name
    root.mkdir()
    artifacts, options = _stage_files(spec, root)
    created, mtime = _created()
    manifest = Manifest(
        name=spec.name, version=version, profile=profile.name, arch=profile.arch,
        backend=spec.kind, precision="fp32",
        inputs=spec.manifest_tensors(spec.inputs), outputs=spec.manifest_tensors(spec.outputs),
        batching=_batching(profile, spec), artifacts=artifacts, fallback_backend=None,
        backend_options=options, source_sha256=sha256_file(spec.path),
        source_name=spec.path.name,
        parity={"passed": True, "artifacts": {}, "allowed_failure": False,
                "skipped": {spec.kind: "no reference: the model is code, not a graph"}},
        toolchain={"edge-pack": __version__, "python": platform.python_version()},
        created=created, input_formats=spec.input_formats, labels=spec.labels,
        warmup=spec.kind == "python" and spec.warmup,  # a pipeline is never warmed up
        decoupled=spec.kind == "python" and spec.decoupled, sequence=spec.sequence,
    )
    write_label_files(root, manifest.labels)
    out = stage / bundle_filename(spec.name, version, profile.name)
    write_bundle(out, root, manifest, key, mtime)
    return out


def check_members(spec: ModelSpec, members: Sequence[Path | str]) -> None:
    """Check a pipeline's wiring against the member bundles given (``--member``); steps whose
    model is not among them are checked at deploy. UsageError for a member no step names."""
    from packager.bundle.reader import open_bundle

    manifests: dict[str, list[Manifest]] = {}
    for path in members:
        with open_bundle(Path(path)) as reader:
            m = reader.manifest
        manifests.setdefault(m.name, []).append(m)
    named = {s.model for s in spec.steps}
    stray = sorted(set(manifests) - named)
    if stray:
        raise UsageError(f"--member bundle(s) of {stray} are no step of pipeline "
                         f"{spec.name!r} (its steps: {sorted(named)})")

    def member(i: int, step: Step) -> Manifest | None:
        candidates = manifests.get(step.model, [])
        if step.version is not None:
            candidates = [m for m in candidates if m.version == step.version]
        return max(candidates, key=lambda m: m.version, default=None)

    batching = _batching_of(spec)
    probe = Manifest(name=spec.name, version=1, profile="", arch="", backend=spec.kind,
                     precision="fp32", inputs=spec.manifest_tensors(spec.inputs),
                     outputs=spec.manifest_tensors(spec.outputs), batching=batching,
                     artifacts={})
    check_wiring(f"{spec.path}: pipeline {spec.name!r}", probe, spec.steps, member)


def _batching_of(spec: ModelSpec) -> BatchingConfig:
    return BatchingConfig(max_batch_size=max(0, spec.max_batch_size))


def build_spec_bundles(spec_path: Path | str, *, name: str | None, version: int,
                       profiles: Sequence[str], out_dir: Path | str,
                       key_path: Path | str | None = None,
                       members: Sequence[Path | str] = (), overwrite: bool = False) -> list[Path]:
    """Build ``out_dir/NAME-VERSION-PROFILE.edgepkg`` per profile from a spec; their paths.

    ``members`` (bundles of a pipeline's step models) let the wiring be checked now.
    Raises a PackagerError subclass, and writes nothing to ``out_dir``, on any failure
    (a bundle there built from another source included, unless ``overwrite``).
    """
    spec = load_spec(spec_path, name)
    if members:
        if spec.kind != "pipeline":
            raise UsageError("--member applies to pipeline specs (kind = \"pipeline\")")
        check_members(spec, members)
    loaded = load_profiles(profiles)
    key = load_private_key(Path(key_path)) if key_path is not None else None
    out, stage = open_stage(out_dir)
    try:
        return publish([_build_one(spec, p, version, stage, key) for p in loaded], out,
                       overwrite=overwrite)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
