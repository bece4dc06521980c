"""Device profiles: the shipped set, validation messages, and shipping inside the wheel."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from packager.bundle.errors import ProfileError
from packager.bundle.profiles import list_profiles, load_profile, parse_profile_file

REPO = Path(__file__).resolve().parents[2]
REQUIRED = ("x86_64-cpu-openvino", "x86_64-cpu-onnxruntime", "arm64-cpu-onnxruntime",
            "arm64-cpu-onnxruntime-int8", "jetson-orin-tensorrt")


def test_shipped_profiles_load_and_are_complete():
    profiles = {p.name: p for p in list_profiles()}
    assert set(REQUIRED) <= set(profiles)
    for p in profiles.values():
        b = p.batching
        assert p.arch in ("x86_64", "aarch64") and p.precision
        assert b.max_batch_size > 0 and b.preferred_batch_sizes and b.max_queue_delay_us > 0
        assert max(b.preferred_batch_sizes) <= b.max_batch_size and b.instances >= 1
        # a relative tolerance of 100% or more would let any output of the right sign pass
        assert p.parity.atol > 0 and 0 < p.parity.rtol < 1
    # a lower precision is never held to a stricter tolerance than a higher one
    rank = {"fp32": 0, "fp16": 1, "int8": 2}
    for hi in profiles.values():
        for lo in profiles.values():
            if rank[hi.precision] < rank[lo.precision]:
                assert hi.parity.atol <= lo.parity.atol and hi.parity.rtol <= lo.parity.rtol, (
                    hi.name, lo.name)
    assert profiles["jetson-orin-tensorrt"].backend == "tensorrt"
    assert profiles["jetson-orin-tensorrt"].fallback_backend == "onnxruntime"
    assert profiles["jetson-orin-tensorrt"].precision == "fp16"
    assert profiles["arm64-cpu-onnxruntime-int8"].precision == "int8"
    assert profiles["x86_64-cpu-openvino"].options["openvino"]["performance_hint"] == "THROUGHPUT"


GOOD = """\
name = "NAME"
arch = "x86_64"
backend = "onnxruntime"
precision = "fp32"
[batching]
max_batch_size = 8
preferred_batch_sizes = [4, 8]
max_queue_delay_us = 100
[parity]
atol = 1e-4
rtol = 1e-3
"""


@pytest.mark.parametrize(("edit", "message"), [
    (("", ""), None),
    (('arch = "x86_64"', 'arch = "riscv"'), "key 'arch' must be one of x86_64, aarch64"),
    (('backend = "onnxruntime"', 'backend = "tflite"'), "key 'backend' must be one of"),
    (('precision = "fp32"', 'precision = "fp16"'), "key 'precision' must be one of fp32, int8"),
    (("max_batch_size = 8", "max_batch_size = -1"), "key 'batching.max_batch_size' must be an"),
    (("max_batch_size = 8", 'max_batch_size = "8"'), "key 'batching.max_batch_size' must be an"),
    (("[4, 8]", "[4, 64]"), "key 'batching.preferred_batch_sizes' must be a list of integers"),
    (("atol = 1e-4\n", ""), "missing required key 'parity.atol'"),
    (("[parity]", "[parityy]"), "unknown key 'parityy'"),
    (('name = "NAME"', 'name = "other"'), "key 'name' must be the file name"),
    (('arch = "x86_64"', 'arch = x86_64'), "not valid TOML"),
    (("max_queue_delay_us = 100", "max_queue_delay_us = 100\n[options]\nfoo = 1"),
     "key 'options.foo' must be a table named after a backend"),
])
def test_malformed_profile_names_file_key_and_expectation(edit, message, tmp_path):
    path = tmp_path / "custom-profile.toml"
    path.write_text(GOOD.replace(*edit).replace("NAME", "custom-profile"))
    if message is None:
        assert parse_profile_file(path).batching.preferred_batch_sizes == (4, 8)
        return
    with pytest.raises(ProfileError) as err:
        parse_profile_file(path)
    assert str(path) in str(err.value) and message in str(err.value), str(err.value)


def test_unknown_profile_lists_the_known_ones():
    with pytest.raises(ProfileError, match=r"known profiles: .*x86_64-cpu-openvino"):
        load_profile("nope")


@pytest.mark.slow
def test_profiles_ship_inside_the_wheel(tmp_path):
    """Build the wheel (no deps, no network) and check the profiles are inside packager/."""
    src = tmp_path / "src"
    for part in ("packager", "device_profiles", "pyproject.toml"):
        s = REPO / part
        if s.is_dir():
            shutil.copytree(s, src / part, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            src.mkdir(exist_ok=True)
            shutil.copy(s, src / part)
    for pkg in ("edge_agent", "console", "systemd"):
        (src / pkg).mkdir(exist_ok=True)
        if pkg != "systemd":
            (src / pkg / "__init__.py").write_text("")
    (src / "README.md").write_text("edge-toolkit\n")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path / "dist"), str(src)],
        capture_output=True, text=True, timeout=120)
    if proc.returncode != 0 and "hatchling" in (proc.stderr + proc.stdout):
        pytest.skip("hatchling is not installed in this environment (no network to fetch it)")
    assert proc.returncode == 0, proc.stderr
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for name in REQUIRED:
        assert f"packager/device_profiles/{name}.toml" in names
    # and the installed layout finds them: unpack, import from there, list
    unpacked = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(unpacked)
    code = ("import packager.bundle.profiles as p; "
            "print(p.profile_dirs()[0]); print(len(p.list_profiles()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=tmp_path, env={"PYTHONPATH": str(unpacked), "PATH": "/usr/bin"},
                         timeout=60)
    assert out.returncode == 0, out.stderr
    first, count = out.stdout.split()
    assert Path(first) == unpacked / "packager" / "device_profiles"
    assert int(count) >= len(REQUIRED)
