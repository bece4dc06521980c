"""Bundles for the parity tests: honest MLP builds, one whose artifact was altered and then
re-signed with the trusted key (valid signature, wrong numbers), and one in the old format
without reference data."""

from __future__ import annotations

import dataclasses
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from packager.build import build_bundles
from packager.bundle.manifest import MANIFEST_NAME, SIGNATURE_NAME, Manifest
from packager.bundle.parity import REFERENCE_FILE
from packager.bundle.reader import open_bundle
from packager.bundle.signing import generate_keypair, load_private_key
from packager.bundle.writer import write_bundle
from packager.samples import make_mlp

PROFILE = "x86_64-cpu-onnxruntime"


@dataclass
class ParityBundles:
    public_key: Path
    private_key: Path
    good: dict[int, Path]  # versions 1 and 2, honest
    tampered: Path  # version 3: artifact weights altered, re-signed
    old_format: Path  # version 4: no reference data (as built before edge-pack stored it)


def rewrite(bundle: Path, out: Path, key: Path, edit_dir: object = None,
            edit_manifest: object = None) -> Path:
    """Extract ``bundle``, let the callables change its files and manifest, and sign it again
    with ``key`` (as someone holding the release key would)."""
    work = out.parent / f"{out.name}.work"
    with open_bundle(bundle) as reader:
        root = reader.extract(work)
        manifest = reader.manifest
    (root / MANIFEST_NAME).unlink()
    (root / SIGNATURE_NAME).unlink()
    if callable(edit_dir):
        edit_dir(root)
    if callable(edit_manifest):
        manifest = edit_manifest(manifest)
    write_bundle(out, root, manifest, load_private_key(key), 0)
    shutil.rmtree(work)
    return out


def alter_weights(root: Path) -> None:
    """Scale the first weight matrix of the ONNX Runtime artifact: still finite, wrong."""
    path = root / "artifacts" / "onnxruntime" / "model.onnx"
    model = onnx.load(str(path))
    init = next(i for i in model.graph.initializer if len(i.dims) == 2)
    arr = numpy_helper.to_array(init) * np.float32(1.7)
    init.CopyFrom(numpy_helper.from_array(arr.astype(np.float32), init.name))
    onnx.save(model, str(path))


def drop_reference(root: Path) -> None:
    (root / REFERENCE_FILE).unlink()


def without_reference(m: Manifest) -> Manifest:
    parity = {k: v for k, v in m.parity.items() if k != "reference"}
    return dataclasses.replace(m, parity=parity)


def build(root: Path) -> ParityBundles:
    private, public = generate_keypair(root / "keys")
    out = root / "bundles"
    good = {}
    for version, seed in ((1, 11), (2, 22), (3, 33), (4, 44)):
        src = make_mlp(root / f"mlp-{version}.onnx", seed=seed)
        (good[version],) = build_bundles(src, name="mlp", version=version, profiles=[PROFILE],
                                         out_dir=out / "honest", key_path=private,
                                         dynamic_batch=True)
    tampered = rewrite(good[3], out / "mlp-3-tampered.edgepkg", private, edit_dir=alter_weights)
    old = rewrite(good[4], out / "mlp-4-old.edgepkg", private, edit_dir=drop_reference,
                  edit_manifest=without_reference)
    return ParityBundles(public, private, {1: good[1], 2: good[2]}, tampered, old)
