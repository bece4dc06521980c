"""Every bad input gets one clear line, a non-zero exit, and no partial bundle in --out."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from packager.build import build_bundles
from packager.bundle.errors import ConversionError, ParityError, ProfileError
from packager.bundle.profiles import PROFILE_PATH_ENV, load_profile
from packager.bundle.reader import open_bundle
from packager.cli import main


def _custom_op_model(path: Path) -> Path:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["h"], name="relu"),
         helper.make_node("FancyOp", ["h"], ["y"], domain="com.example", name="fancy")],
        "custom", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.example", 1)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def _run(capsys, argv: list[str]) -> tuple[int, str]:
    code = main(argv)
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    return code, "\n".join(lines)


def _inputs(tmp_path: Path, mlp_path: Path) -> dict[str, Path]:
    not_onnx = tmp_path / "notes.onnx"
    not_onnx.write_text("this is not a model\n")
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(mlp_path.read_bytes()[: mlp_path.stat().st_size // 2])
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    return {"not_onnx": not_onnx, "truncated": truncated, "empty": empty,
            "custom": _custom_op_model(tmp_path / "custom.onnx")}


@pytest.mark.parametrize(("case", "message"), [
    ("not_onnx", "not an ONNX model"),
    ("truncated", "not an ONNX model"),
    ("empty", "not an ONNX model"),
    ("missing_model", "no such model file"),
    ("unknown_profile", "unknown device profile 'raspberry-pi-9'"),
    ("custom_op", "cannot convert op com.example::FancyOp"),
    ("missing_key", "private key file"),
    ("bad_key", "not an unencrypted PEM private key"),
    ("version_zero", "version '0' must be a positive integer"),
    ("version_negative", "version '-2' must be a positive integer"),
    ("version_text", "version 'latest' must be a positive integer"),
    ("version_float", "version '1.5' must be a positive integer"),
    ("bad_name", "model name '../etc' is invalid"),
    ("bad_max_batch", "--max-batch '0' must be a positive integer"),
    ("dynamic_batch_unfit", "--dynamic-batch needs dim 0"),
])
def test_bad_input_one_line_nonzero_exit_no_partial_bundle(case, message, tmp_path, mlp_path,
                                                           capsys, keypair):
    models = _inputs(tmp_path, mlp_path)
    out = tmp_path / "out"
    args = {"model": str(mlp_path), "--name": "mlp", "--version": "1",
            "--profile": "x86_64-cpu-onnxruntime", "--out": str(out)}
    if case in models:
        args["model"] = str(models[case])
    if case == "custom_op":
        args["model"] = str(models["custom"])
        args["--profile"] = "x86_64-cpu-openvino"
    if case == "missing_model":
        args["model"] = str(tmp_path / "nope.onnx")
    if case == "unknown_profile":
        args["--profile"] = "raspberry-pi-9"
    if case == "missing_key":
        args["--key"] = str(tmp_path / "missing.key")
    if case == "bad_key":
        args["--key"] = str(keypair[1])  # a public key is not a private key
    if case.startswith("version_"):
        args["--version"] = {"version_zero": "0", "version_negative": "-2",
                             "version_text": "latest", "version_float": "1.5"}[case]
    if case == "bad_name":
        args["--name"] = "../etc"
    if case == "bad_max_batch":
        args["--max-batch"] = "0"
    argv = ["build", args.pop("model"), *[x for kv in args.items() for x in kv]]
    if case == "dynamic_batch_unfit":
        fixed = tmp_path / "fixed.onnx"
        from tests.support.model_factory import make_mlp

        # batch dim already dynamic is fine; a leading dim of 2 cannot become a batch dim
        m = onnx.load(make_mlp(fixed))
        for vi in (*m.graph.input, *m.graph.output):
            vi.type.tensor_type.shape.dim[0].Clear()
            vi.type.tensor_type.shape.dim[0].dim_value = 2
        onnx.save(m, fixed)
        argv[1] = str(fixed)
        argv.append("--dynamic-batch")
    code, err = _run(capsys, argv)
    assert code != 0
    assert err.count("\n") == 0, err  # one line
    assert err.startswith("edge-pack: error: ") and message in err, err
    assert not out.exists() or list(out.iterdir()) == []


def test_failure_in_a_later_profile_leaves_no_bundle_of_earlier_ones(tmp_path, capsys):
    custom = _custom_op_model(tmp_path / "custom.onnx")
    out = tmp_path / "out"
    # onnxruntime accepts nothing from com.example either, but the first profile is converted
    # before the openvino one fails: the whole build must leave nothing behind
    with pytest.raises(ConversionError):
        build_bundles(custom, name="c", version=1, out_dir=out,
                      profiles=["x86_64-cpu-onnxruntime", "x86_64-cpu-openvino"])
    assert list(out.iterdir()) == []


def _strict_profile(dirpath: Path) -> Path:
    base = load_profile("x86_64-cpu-openvino-fp16").path
    assert base is not None
    text = base.read_text().replace('name = "x86_64-cpu-openvino-fp16"',
                                    'name = "strict-fp16"')
    text = text.replace("atol = 5e-3", "atol = 1e-9").replace("rtol = 2e-2", "rtol = 0")
    dirpath.mkdir()
    (dirpath / "strict-fp16.toml").write_text(text)
    return dirpath


def test_parity_past_tolerance_refuses_unless_allowed(tmp_path, mlp_path, monkeypatch, capsys):
    monkeypatch.setenv(PROFILE_PATH_ENV, str(_strict_profile(tmp_path / "profiles")))
    out = tmp_path / "out"
    with pytest.raises(ParityError, match="strict-fp16: openvino artifact disagrees"):
        build_bundles(mlp_path, name="mlp", version=1, profiles=["strict-fp16"], out_dir=out)
    assert list(out.iterdir()) == []
    code, err = _run(capsys, ["build", str(mlp_path), "--name", "mlp", "--version", "1",
                              "--profile", "strict-fp16", "--out", str(out)])
    assert code == 1 and "--allow-parity-failure" in err
    (path,) = build_bundles(mlp_path, name="mlp", version=1, profiles=["strict-fp16"],
                            out_dir=out, allow_parity_failure=True)
    with open_bundle(path) as r:
        parity = r.manifest.parity
    assert parity["passed"] is False and parity["allowed_failure"] is True
    assert parity["artifacts"]["openvino"]["passed"] is False
    assert parity["artifacts"]["openvino"]["max_abs_error"] > 1e-9


def test_malformed_profile_on_the_search_path_is_named(tmp_path, monkeypatch, capsys):
    d = tmp_path / "profiles"
    d.mkdir()
    (d / "broken.toml").write_text('name = "broken"\narch = "x86_64"\nbackend = "openvino"\n'
                                   'precision = "int4"\n[batching]\n[parity]\natol=1\nrtol=1\n')
    monkeypatch.setenv(PROFILE_PATH_ENV, str(d))
    with pytest.raises(ProfileError, match=r"broken\.toml: key 'precision' must be one of fp32"):
        load_profile("broken")
    code, err = _run(capsys, ["profiles"])
    assert code == 1 and "broken.toml" in err and "'precision'" in err


def test_out_dir_that_is_a_file_and_non_bundle_inspect(tmp_path, mlp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, err = _run(capsys, ["build", str(mlp_path), "--name", "m", "--version", "1",
                              "--profile", "x86_64-cpu-onnxruntime", "--out", str(blocker)])
    assert code == 1 and err.count("\n") == 0 and "output directory" in err
    for command in ("inspect", "verify"):
        code, err = _run(capsys, [command, str(mlp_path)])
        assert code == 1 and err.count("\n") == 0 and "not a bundle" in err, err
