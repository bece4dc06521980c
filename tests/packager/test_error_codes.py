"""Every packager error carries a machine-readable code, one per class, and edge-pack prints it
after the message and, for a command run with --json, as a JSON error object on stdout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from packager.bundle.errors import BundleError, ErrorCode, PackagerError, SignatureError
from packager.cli import main
from tests.project.test_import_hygiene import _submodules


def _all_error_classes() -> list[type[PackagerError]]:
    import importlib

    for module in [*_submodules("packager.bundle"), "packager.cli"]:
        importlib.import_module(module)  # every module that defines an error class
    found: list[type[PackagerError]] = []
    todo: list[type[PackagerError]] = [PackagerError]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo += cls.__subclasses__()
    return found


def test_every_error_class_has_its_own_code_and_every_code_a_class() -> None:
    classes = _all_error_classes()
    by_code: dict[ErrorCode, list[str]] = {}
    for cls in classes:
        assert isinstance(cls.code, ErrorCode), cls
        by_code.setdefault(cls.code, []).append(cls.__name__)
    shared = {code.value: names for code, names in by_code.items() if len(names) > 1}
    assert shared == {}, f"one code per class: {shared}"
    assert set(by_code) == set(ErrorCode), "a code no class raises"
    assert SignatureError("x").code is ErrorCode.SIGNATURE
    assert BundleError("x").code.value == "BUNDLE"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_cli_prints_the_code_after_the_message(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    junk = tmp_path / "junk.edgepkg"
    junk.write_bytes(b"not a tar archive at all")
    code, out, err = _run(capsys, "verify", str(junk))
    assert code == 1 and out == ""
    assert err.startswith("edge-pack: error: ") and err.endswith(" [BUNDLE]\n"), err
    assert err.count("\n") == 1


def test_an_untrusted_signature_has_its_own_code(mlp_bundles: dict[str, Path],
                                                 other_keypair: tuple[Path, Path],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    bundle = mlp_bundles["x86_64-cpu-onnxruntime"]
    code, _, err = _run(capsys, "verify", str(bundle), "--pubkey", str(other_keypair[1]))
    assert code == 1 and err.endswith(" [UNTRUSTED_SIGNATURE]\n"), err


def test_a_json_command_reports_its_error_as_json_on_stdout(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    junk = tmp_path / "junk.edgepkg"
    junk.write_bytes(b"\x00" * 64)
    code, out, err = _run(capsys, "inspect", str(junk), "--json")
    assert code == 1
    error = json.loads(out)["error"]
    assert error["code"] == "BUNDLE"
    assert error["message"] and error["message"] in err
    code, out, _ = _run(capsys, "inspect", str(junk))  # without --json: stdout stays empty
    assert code == 1 and out == ""
