"""``edge-pack build SPEC.toml``: real builds of the example specs, and every bad spec refused
with one clear line and nothing written."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import pytest

from packager.bundle.signing import generate_keypair
from packager.cli import main
from tests.pipelines.conftest import EXAMPLE, PROFILE


@pytest.fixture
def src(tmp_path: Path) -> Path:
    d = tmp_path / "src"
    shutil.copytree(EXAMPLE, d)
    (d / "my prep.py").write_text("")
    (d / "json.py").write_text("")
    return d


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["build", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_python_spec_builds_a_signed_bundle_carrying_its_sources(
        src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    private, public = generate_keypair(tmp_path / "keys")
    code, out, err = run(capsys, str(src / "prep.toml"), "--version", "2", "--profile", PROFILE,
                         "--key", str(private), "--out", str(tmp_path / "dist"), "--quiet")
    assert code == 0, err
    bundle = Path(out.strip())
    assert bundle.name == f"prep-2-{PROFILE}.edgepkg"
    with tarfile.open(bundle) as tar:
        names = tar.getnames()
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
        assert tar.extractfile("code/prep.py").read() == (src / "prep.py").read_bytes()  # type: ignore[union-attr]
    assert names[:2] == ["manifest.json", "manifest.sig"]
    assert {"code/prep.py", "code/imaging.py"} <= set(names)
    assert {f["path"] for f in manifest["files"]} == {"code/prep.py", "code/imaging.py"}
    assert manifest["backend"] == "python" and manifest["artifacts"] == {"python": "code/prep.py"}
    assert manifest["backend_options"]["python"]["entry"] == "prep:preprocess"
    assert manifest["inputs"] == [{"name": "IMAGE", "datatype": "BYTES", "shape": [-1, 1]}]
    assert manifest["batching"]["max_batch_size"] == 8
    assert main(["verify", str(bundle), "--pubkey", str(public)]) == 0


def test_a_pipeline_spec_builds_with_its_steps_in_the_manifest(
        src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, str(src / "classify.toml"), "--name", "classify", "--version",
                         "1", "--profile", PROFILE, "--out", str(tmp_path / "dist"))
    assert code == 0, err
    assert "note: bundles are unsigned" in err  # a pipeline carries no code
    with tarfile.open(out.strip()) as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
    steps = manifest["backend_options"]["pipeline"]["steps"]
    assert [s["model"] for s in steps] == ["prep", "mlp", "post"]
    assert steps[1] == {"model": "mlp", "version": None, "inputs": {"input": "features"},
                        "outputs": {"probs": "probs"}}


BAD = [
    ("colour = 1\n", "unknown key(s) ['colour']"),
    ('kind = "lambda"\n', "kind = 'lambda' must be one of"),
    ('source = ["../prep.py"]\n', "escapes the spec's directory"),
    ('source = ["/etc/passwd"]\n', "escapes the spec's directory"),
    ('source = ["missing.py"]\n', "is not a regular file"),
    ('entry = "prep"\n', "must be 'module:function'"),
    ('entry = "other:f"\n', "entry module 'other' is not among the sources"),
    ("max_batch_size = -1\n", "max_batch_size = -1 must be an integer"),
    ('max_batch_size = "8"\n', "max_batch_size = '8' must be an integer"),
    ("requires = [1]\n", "requires = [1] must list distribution names"),
    ('decoupled = "yes"\n', "decoupled = 'yes' must be true or false"),
    ("decoupled = true\nwarmup = true\n", "decoupled = true cannot be warmed up"),
    ('source = ["json.py"]\nentry = "json:f"\n', "has the name of a standard or agent module"),
    ("instances = 100\n", "instances = 100 must be an integer from 0 to 64"),
    ('source = ["prep.py", "imaging.py", "my prep.py"]\n', "rename the file"),
    ('name = "a/b"\n', "must be a model name"),
    ("[[inputs]]\nname = \"X\"\ndatatype = \"FP99\"\nshape = [1]\n", "datatype 'FP99'"),
    ("[[inputs]]\nname = \"X\"\ndatatype = \"FP32\"\nshape = [0]\n", "shape [0]"),
    ("[[inputs]]\nname = \"X\"\ndatatype = \"FP32\"\nshape = [1]\nsize = 2\n",
     "unknown key(s) ['size']"),
    ("[[steps]]\nmodel = \"x\"\n", "unknown key(s) ['steps']"),
    ("this is not toml", "not valid TOML"),
    ('labels = "labels.txt"\n', "labels must be a table of output name -> label file"),
    ('labels = { NOPE = "prep.py" }\n', "the model has no output 'NOPE'"),
    ('labels = { FEATURES = "prep.py" }\n', "has 64 classes per row"),
    ('labels = { FEATURES = "missing.txt" }\n', "cannot read"),
]


def _spec_text(change: str) -> str:
    """prep.toml with ``change`` in place of the keys it sets (tables appended)."""
    base = (EXAMPLE / "prep.toml").read_text()
    if change == "this is not toml":
        return change
    if change.startswith("[["):
        return base + "\n" + change
    keys = {ln.split("=")[0].strip() for ln in change.splitlines()}
    lines = base.splitlines()
    cut = next(i for i, ln in enumerate(lines) if ln.startswith("[["))
    top = [ln for ln in lines[:cut] if ln.split("=")[0].strip() not in keys]  # top-level keys
    return "\n".join([*top, change.rstrip("\n"), *lines[cut:]]) + "\n"


@pytest.mark.parametrize(("change", "needle"), BAD)
def test_a_bad_spec_is_one_clear_line_and_writes_nothing(
        src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], change: str,
        needle: str) -> None:
    spec = src / "bad.toml"
    spec.write_text(_spec_text(change))
    out_dir = tmp_path / "dist"
    code, out, err = run(capsys, str(spec), "--version", "1", "--profile", PROFILE,
                         "--out", str(out_dir))
    assert code == 1 and out == ""
    assert err.startswith("edge-pack: error: ") and err.count("\n") == 1, err
    assert needle in err, err
    assert not out_dir.exists() or list(out_dir.iterdir()) == []


BAD_PIPELINES = [
    ('inputs = { IMAGE = "IMAGE" }', 'inputs = { IMAGE = "nowhere" }', "reads ['nowhere']"),
    ('model = "prep"', 'model = "prep"\nversion = 0', "version = 0 must be an integer"),
    ('model = "prep"', 'model = "classify"', "names the pipeline itself"),
    ('outputs = { FEATURES = "features" }', 'outputs = { FEATURES = "IMAGE" }',
     "writes tensor 'IMAGE', which already exists"),
    ('outputs = { LABELS = "LABELS", SCORES = "SCORES" }', 'outputs = { LABELS = "LABELS" }',
     "output(s) ['SCORES'] are produced by no step"),
]


@pytest.mark.parametrize(("old", "new", "needle"), BAD_PIPELINES)
def test_a_bad_pipeline_spec_is_refused(src: Path, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str], old: str, new: str,
                                        needle: str) -> None:
    text = (src / "classify.toml").read_text()
    assert old in text
    (src / "bad.toml").write_text(text.replace(old, new, 1))
    out_dir = tmp_path / "dist"
    code, _, err = run(capsys, str(src / "bad.toml"), "--version", "1", "--profile", PROFILE,
                       "--out", str(out_dir))
    assert code == 1 and needle in err and err.count("\n") == 1, err
    assert not out_dir.exists() or list(out_dir.iterdir()) == []


def test_name_must_repeat_the_spec_and_onnx_flags_are_refused(
        src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = [str(src / "prep.toml"), "--version", "1", "--profile", PROFILE, "--out",
            str(tmp_path / "d")]
    code, _, err = run(capsys, *base, "--name", "other")
    assert code == 1 and "--name 'other' differs from the spec's name 'prep'" in err
    code, _, err = run(capsys, *base, "--max-batch", "4")
    assert code == 1 and "a spec sets max_batch_size itself" in err
    code, _, err = run(capsys, str(tmp_path / "m.onnx"), "--version", "1", "--profile",
                       PROFILE, "--out", str(tmp_path / "d"))
    assert code == 1 and "--name is required" in err


def test_an_unsigned_python_build_warns_that_agents_will_refuse_it(
        src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, str(src / "post.toml"), "--version", "1", "--profile",
                         PROFILE, "--out", str(tmp_path / "dist"))
    assert code == 0 and out.strip().endswith(".edgepkg")
    assert "carry Python code and are unsigned: every agent refuses them" in err


def test_given_member_bundles_a_pipeline_wiring_is_checked_at_build(
        src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], built) -> None:  # type: ignore[no-untyped-def]
    members = [arg for name in ("mlp", "prep", "post")
               for arg in ("--member", str(built.bundles[name]))]
    base = ["--version", "1", "--profile", PROFILE, "--out", str(tmp_path / "dist")]
    code, out, err = run(capsys, str(src / "classify.toml"), *base, *members)
    assert code == 0 and out.strip().endswith(".edgepkg"), err
    text = (src / "classify.toml").read_text()
    (src / "wrong.toml").write_text(text.replace('inputs = { input = "features" }',
                                                 'inputs = { input = "IMAGE" }'))
    code, out, err = run(capsys, str(src / "wrong.toml"), *base[:-1], str(tmp_path / "d2"),
                         "--member", str(built.bundles["mlp"]))
    assert code == 1 and err.count("\n") == 1, err
    assert "step 2 (model 'mlp'): input 'input' <- 'IMAGE': datatype BYTES does not match " \
           "FP32" in err
    assert not (tmp_path / "d2").exists() or list((tmp_path / "d2").iterdir()) == []
    code, _, err = run(capsys, str(src / "classify.toml"), *base, "--member",
                       str(built.bundles["hang"]))
    assert code == 1 and "bundle(s) of ['hang'] are no step of pipeline 'classify'" in err
    code, _, err = run(capsys, str(src / "prep.toml"), *base, "--member",
                       str(built.bundles["mlp"]))
    assert code == 1 and "--member applies to pipeline specs" in err
