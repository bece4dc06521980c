"""``edge-agent doctor``: what this device is and can run, and each problem with its fix.

Read-only: nothing here writes to the device or the state directory (the state database is
opened read-only), so it is safe beside a running agent.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import platform
import re
import shutil
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

OK, INFO, WARN, FAIL = "ok", "info", "warn", "fail"
_MIB = 1 << 20
_RUNTIMES = {"onnxruntime": ("onnxruntime", "onnxruntime"),
             "openvino": ("openvino", "openvino"), "tensorrt": ("tensorrt", "tensorrt")}


@dataclass(frozen=True)
class Finding:
    """One check: ``status`` is ok, info, warn or fail; ``fix`` says what to do about it."""

    area: str
    check: str
    status: str
    detail: str
    fix: str = ""


def _run(cmd: list[str], timeout: float = 10.0) -> str | None:
    """A tool's stdout, or None when it is absent or fails."""
    if shutil.which(cmd[0]) is None:
        return None
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def cpu_flags(cpuinfo: str) -> set[str]:
    """The CPU feature flags of /proc/cpuinfo (x86 ``flags``, Arm ``Features``)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


def _cpu(arch: str) -> Iterator[Finding]:
    try:
        flags = cpu_flags(Path("/proc/cpuinfo").read_text(errors="replace"))
    except OSError:
        flags = set()
    if not flags:
        yield Finding("device", "CPU features", INFO, "unknown (/proc/cpuinfo unreadable)")
        return
    if arch == "x86_64":
        have = {"AVX2": "avx2" in flags, "AVX-512": "avx512f" in flags,
                "VNNI": bool(flags & {"avx512_vnni", "avx_vnni"}), "AMX": "amx_tile" in flags}
        missing = "" if have["AVX2"] else "without AVX2 the runtimes use slower SSE kernels"
        fix = "" if have["AVX2"] else "expect several times lower throughput than on the bench"
    else:
        have = {"NEON": "asimd" in flags, "dot-product": "asimddp" in flags,
                "fp16": "asimdhp" in flags, "i8mm": "i8mm" in flags, "SVE": "sve" in flags}
        missing = "" if have["NEON"] else "without NEON the runtimes cannot use their Arm kernels"
        fix = "" if have["NEON"] else "use a board with an ARMv8-A core (NEON is standard there)"
    text = ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in have.items())
    yield Finding("device", "CPU features", WARN if missing else OK,
                  f"{text}{'; ' + missing if missing else ''}", fix)
    if arch == "x86_64" and not have["VNNI"]:
        yield Finding("device", "int8 speed-up", INFO, "no VNNI: int8 profiles gain little here")
    if arch == "aarch64" and not have["dot-product"]:
        yield Finding("device", "int8 speed-up", INFO,
                      "no dot-product instructions: int8 profiles gain little here")


def _device() -> Iterator[Finding]:
    from edge_agent.deploy.device import normalize_arch

    arch = normalize_arch(platform.machine())
    known = arch in ("x86_64", "aarch64")
    yield Finding("device", "architecture", OK if known else FAIL,
                  f"{arch} ({platform.system()} {platform.release()}), Python "
                  f"{platform.python_version()}",
                  "" if known else "device profiles exist for x86_64 and aarch64 only")
    yield from _cpu(arch)
    import psutil

    mem = psutil.virtual_memory()
    low = mem.available < 512 * _MIB
    yield Finding("device", "memory", WARN if low else OK,
                  f"{mem.total / 2**30:.1f} GiB, {mem.available / 2**30:.1f} GiB available",
                  "less than 512 MiB free: stop other services or deploy smaller models"
                  if low else "")


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _probe(what: str, call: Callable[[], str]) -> tuple[str, str]:
    try:
        return OK, call()
    except Exception as exc:  # a runtime that imports but cannot start: report it
        return FAIL, f"{what} failed: {str(exc).splitlines()[0] if str(exc) else exc!r}"


def _ort_providers() -> str:
    import onnxruntime as ort

    return "execution providers: " + ", ".join(ort.get_available_providers())


def _ov_devices() -> str:
    import openvino as ov

    return "devices: " + ", ".join(ov.Core().available_devices)


def _runtimes(nvidia: bool) -> Iterator[Finding]:
    found = []
    for name, (module, dist) in _RUNTIMES.items():
        version = _version(dist)
        importable = importlib.util.find_spec(module) is not None
        if not importable:
            if name == "tensorrt":
                yield Finding("runtimes", name, FAIL if nvidia else INFO, "not installed", (
                    "TensorRT Python bindings are not importable: on Jetson they come with "
                    "JetPack, not from pip (create the venv with --system-site-packages); on a "
                    "dGPU: pip install edgeship[tensorrt]") if nvidia else "")
            else:
                yield Finding("runtimes", name, INFO, "not installed",
                              f"pip install {dist} (or the edgeship[agent] extra)")
            continue
        found.append(name)
        status, detail = OK, f"version {version or 'unknown'}"
        if name == "onnxruntime":
            status, more = _probe("listing execution providers", _ort_providers)
            detail += f"; {more}"
        elif name == "openvino":
            status, more = _probe("listing devices", _ov_devices)
            detail += f"; {more}"
        yield Finding("runtimes", name, status, detail,
                      "" if status == OK else f"reinstall {dist} for this Python "
                      f"({sys.executable})")
    if not found:
        yield Finding("runtimes", "any runtime", FAIL, "no inference runtime is installed",
                      "pip install 'edgeship[agent]' (ONNX Runtime and OpenVINO)")


def _gpu() -> tuple[list[Finding], bool]:
    findings: list[Finding] = []
    smi = _run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                "--format=csv,noheader"])
    if smi:
        header = _run(["nvidia-smi"]) or ""
        cuda = re.search(r"CUDA Version:\s*([\d.]+)", header)
        findings.append(Finding("gpu", "NVIDIA GPU", OK, "; ".join(smi.strip().splitlines())
                                + (f"; CUDA {cuda[1]}" if cuda else "")))
    tegra = Path("/etc/nv_tegra_release")
    if tegra.exists():
        with contextlib.suppress(OSError):
            release = tegra.read_text(errors="replace").splitlines()[0].strip("# ")
            findings.append(Finding("gpu", "Jetson (L4T)", OK, release))
        mode = _run(["nvpmodel", "-q"])
        findings.append(Finding("gpu", "power mode", OK if mode else WARN,
                                " ".join(mode.split()) if mode else "nvpmodel -q gave nothing",
                                "" if mode else "run as root or install nvpmodel (JetPack)"))
        findings.append(Finding("gpu", "tegrastats", OK if shutil.which("tegrastats") else INFO,
                                "present" if shutil.which("tegrastats") else "absent"))
    nvidia = bool(findings)
    if nvidia:
        pycuda = importlib.util.find_spec("pycuda") is not None
        findings.append(Finding("gpu", "pycuda", OK if pycuda else FAIL,
                                f"version {_version('pycuda')}" if pycuda else "not importable",
                                "" if pycuda else "on Jetson: apt install python3-pycuda and a "
                                "venv with --system-site-packages; else pip install pycuda"))
    else:
        findings.append(Finding("gpu", "NVIDIA GPU", INFO, "none found (no nvidia-smi, not a "
                                                           "Jetson): CPU profiles only"))
    return findings, nvidia


def _grpc_hooks() -> Finding:
    from edge_agent import grpc_internals

    found = grpc_internals.hooks()
    if not found.missing():
        return Finding("runtimes", "grpcio server hooks", OK, found.summary())
    return Finding("runtimes", "grpcio server hooks", WARN,
                   f"{found.summary()}; abuse protections reduced: {'; '.join(found.reduced())}",
                   "install the grpcio the agent supports: pip install 'edge-toolkit[agent]'")


def _profile() -> Finding:
    from edge_agent.deploy.device import detect_device
    from packager.bundle.profiles import list_profiles

    device = detect_device()
    names = {p.name for p in list_profiles()}
    if device.profile in names:
        return Finding("profile", "profile it would pick", OK, device.profile)
    return Finding("profile", "profile it would pick", FAIL,
                   f"{device.profile} (no such profile: no runtime of a profile for "
                   f"{device.arch} is installed)",
                   "install a runtime (pip install 'edgeship[agent]') or pass --profile")


def _free(path: Path) -> Finding:
    usage = shutil.disk_usage(path)
    free = usage.free
    status = FAIL if free < 100 * _MIB else WARN if free < 1 << 30 else OK
    return Finding("state", "disk", status,
                   f"{free / 2**30:.1f} GiB free of {usage.total / 2**30:.1f} GiB at {path}",
                   "" if status == OK else "free space: deploys stage a full copy of each "
                   "bundle; lower [management] keep_versions to prune old versions")


def _state(state_dir: Path) -> Iterator[Finding]:
    from edge_agent.state import DB_NAME, TOKEN_FILE
    from edge_agent.state.lock import LOCK_FILE

    if not state_dir.is_dir():
        yield Finding("state", "state directory", FAIL, f"{state_dir} does not exist",
                      "pass the agent's --state-dir (see agent.toml) or start the agent once "
                      "to create it")
        return
    writable = os.access(state_dir, os.W_OK | os.X_OK)
    yield Finding("state", "state directory", OK if writable else FAIL,
                  f"{state_dir} ({'writable' if writable else 'not writable by this user'})",
                  "" if writable else "run as the agent's user, or chown it to that user "
                  "(mode 0700)")
    yield _free(state_dir)
    db = state_dir / DB_NAME
    if not db.exists():
        yield Finding("state", DB_NAME, INFO, "absent (no agent has run here yet)")
    else:
        yield _database(db)
    token = state_dir / TOKEN_FILE
    if token.exists():
        mode = stat.S_IMODE(token.stat().st_mode)
        loose = bool(mode & 0o077)
        yield Finding("state", TOKEN_FILE, WARN if loose else OK, f"mode {mode:04o}",
                      f"chmod 600 {token}" if loose else "")
    lock = state_dir / LOCK_FILE
    holder = ""
    with contextlib.suppress(OSError):
        holder = lock.read_text().strip()
    yield Finding("state", "agent", INFO, f"lock holder: {holder}" if holder else
                  "no agent has locked it (or it ran before holders were written)")
    models = state_dir / "models"
    count = sum(1 for m in models.iterdir() if m.is_dir() for v in m.iterdir()
                if v.is_dir()) if models.is_dir() else 0
    yield Finding("state", "model versions on disk", INFO, str(count))


def _database(db: Path) -> Finding:
    from edge_agent.state.store import SCHEMA_VERSION

    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            result = conn.execute("PRAGMA quick_check").fetchone()[0]
            schema = conn.execute("PRAGMA user_version").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error as exc:
        return Finding("state", db.name, FAIL, f"unreadable: {exc}",
                       f"move {db} aside and redeploy (the agent starts a new one)")
    if result != "ok":
        return Finding("state", db.name, FAIL, f"integrity check: {result}",
                       f"stop the agent, move {db} aside and redeploy")
    if schema > SCHEMA_VERSION:
        return Finding("state", db.name, FAIL, f"schema {schema} is newer than this agent's "
                       f"({SCHEMA_VERSION})", "upgrade edgeship on this device")
    return Finding("state", db.name, OK, f"integrity ok, schema {schema}")


def run_doctor(state_dir: Path | None = None) -> list[Finding]:
    """Every check, in display order."""
    findings = list(_device())
    gpu, nvidia = _gpu()
    findings += list(_runtimes(nvidia))
    if importlib.util.find_spec("grpc") is not None:
        findings.append(_grpc_hooks())
    findings += gpu
    findings.append(_profile())
    if state_dir is not None:
        findings += list(_state(state_dir))
    return findings


def failed(findings: list[Finding]) -> bool:
    """True when any check failed (the command's exit code is then 1)."""
    return any(f.status == FAIL for f in findings)
