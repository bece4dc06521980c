"""From a bound function to a device: ``edge-pack spec MODULE:FUNCTION`` prints the model spec
(packager/spec.py, ``kind = "python"``, ``calling = "requests"``) that serves the function
with the tensors, batching and streaming of its ``@signature`` (``edge_agent.inline``), and
``edge-pack build MODULE:FUNCTION`` builds bundles from it.

MODULE is a ``.py`` file's path or a module name found from the current directory; only that
one file is shipped (``code/``). ``requires`` is the explicit list given (``--requires``),
never guessed from the environment.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from packager.bundle.errors import UsageError
from packager.bundle.function_signature import CALLING_REQUESTS, FunctionSignature, signature_of
from packager.bundle.manifest import TensorSpec

_TARGET = re.compile(r"^(?P<module>[^:]+):(?P<func>[A-Za-z_][A-Za-z0-9_]*)$")


def is_function_target(text: str) -> bool:
    """Whether ``text`` names a function (``MODULE:FUNCTION``) rather than a model file."""
    return _TARGET.match(text) is not None and not Path(text).exists()


@dataclass(frozen=True)
class BoundFunction:
    """A function found by its target, with the module file that holds it."""

    module_file: Path
    module: str
    function: str
    signature: FunctionSignature


def _module_file(module: str) -> Path:
    if module.endswith(".py"):
        path = Path(module)
    else:
        if not all(part.isidentifier() for part in module.split(".")):
            raise UsageError(f"{module!r} is neither a .py file nor a module name")
        path = Path(*module.split(".")).with_suffix(".py")
    if not path.is_file():
        raise UsageError(f"module file {path} not found (give MODULE:FUNCTION with MODULE a "
                         ".py path or a module name under the current directory)")
    return path.resolve()


def find_function(target: str) -> BoundFunction:
    """Import the module of ``target`` and read its function's signature; UsageError when the
    module does not import, has no such function, or the function carries no signature."""
    match = _TARGET.match(target)
    if match is None:
        raise UsageError(f"{target!r} is not MODULE:FUNCTION (e.g. classifier.py:classify)")
    path = _module_file(match["module"])
    name, func = path.stem, match["func"]
    if name in sys.stdlib_module_names or not name.isidentifier():
        raise UsageError(f"module file {path.name}: rename it (it must be a Python identifier "
                         "that is not a standard module)")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"{path} cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise UsageError(f"{path} does not import: {type(exc).__name__}: {exc}") from exc
    finally:
        sys.path.remove(str(path.parent))
    fn = getattr(module, func, None)
    if not callable(fn):
        raise UsageError(f"{path} has no function {func!r}")
    found = signature_of(fn)
    if found is None:
        raise UsageError(f"{name}:{func} carries no serving signature; decorate it with "
                         "@signature(inputs=[Tensor(...)], outputs=[Tensor(...)], "
                         "max_batch_size=N) from edge_agent.inline")
    return BoundFunction(path, name, func, found)


def _tensors(key: str, specs: Sequence[TensorSpec]) -> list[str]:
    lines = []
    for t in specs:
        shape = ", ".join(str(d) for d in t.shape)
        lines.append(f'[[{key}]]\nname = "{t.name}"\ndatatype = "{t.datatype}"\n'
                     f"shape = [{shape}]\n")
    return lines


def spec_text(bound: BoundFunction, name: str | None = None,
              requires: Sequence[str] = ()) -> str:
    """The TOML model spec of ``bound`` (saved next to its module file, it builds as is)."""
    sig = bound.signature
    model = name or bound.function
    head = [
        f"# edge-pack spec {bound.module}:{bound.function} (generated from its @signature)",
        f"name = {json.dumps(model)}",
        'kind = "python"',
        f'source = ["{bound.module_file.name}"]',
        f'entry = "{bound.module}:{bound.function}"',
        f'calling = "{CALLING_REQUESTS}"',
        f"max_batch_size = {sig.max_batch_size}",
        f"decoupled = {'true' if sig.decoupled else 'false'}",
        f"requires = {json.dumps(list(requires))}",
    ]
    if sig.instances > 1:
        head.append(f"instances = {sig.instances}")
    return "\n".join(head) + "\n\n" + "\n".join(
        _tensors("inputs", sig.inputs) + _tensors("outputs", sig.outputs))


def build_function_bundles(target: str, *, name: str | None, version: int,
                           profiles: Sequence[str], out_dir: Path | str,
                           key_path: Path | str | None = None, requires: Sequence[str] = (),
                           overwrite: bool = False) -> list[Path]:
    """Build ``out_dir/NAME-VERSION-PROFILE.edgepkg`` per profile from the function of
    ``target``: its spec and module file staged in a temporary directory, then built as any
    spec is (packager/spec_build.py)."""
    from packager.spec_build import build_spec_bundles

    bound = find_function(target)
    stage = Path(tempfile.mkdtemp(prefix="edge-pack-function-"))
    try:
        shutil.copyfile(bound.module_file, stage / bound.module_file.name)
        spec = stage / f"{name or bound.function}.toml"
        spec.write_text(spec_text(bound, name, requires), encoding="utf-8")
        return build_spec_bundles(spec, name=None, version=version, profiles=profiles,
                                  out_dir=out_dir, key_path=key_path, overwrite=overwrite)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
