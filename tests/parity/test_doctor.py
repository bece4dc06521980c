"""``edge-agent doctor``: real subprocesses on this machine and real state directories."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from edge_agent.doctor import cpu_flags
from edge_agent.state import StateStore


def _doctor(*args: str) -> tuple[int, str, str]:
    proc = subprocess.run([sys.executable, "-m", "edge_agent", "doctor", *args],
                          capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout, proc.stderr


def _findings(*args: str) -> tuple[int, dict[str, Any]]:
    code, out, err = _doctor(*args, "--json")
    assert err == "" or "Traceback" not in err
    report = json.loads(out)
    return code, {f["check"]: f for f in report["findings"]}


def test_this_machine_and_a_healthy_state_dir_pass(tmp_path: Path) -> None:
    state = tmp_path / "state"
    StateStore.open(state).close()
    code, found = _findings("--state-dir", str(state))
    assert code == 0, found
    assert found["architecture"]["status"] == "ok"
    assert found["architecture"]["detail"].startswith(("x86_64", "aarch64"))
    assert found["CPU features"]["detail"].startswith(("AVX2", "NEON"))
    assert found["onnxruntime"]["status"] == "ok"
    assert "CPUExecutionProvider" in found["onnxruntime"]["detail"]
    assert found["profile it would pick"]["status"] == "ok"
    assert found["state.db"]["status"] == "ok" and "integrity ok" in found["state.db"]["detail"]
    assert found["disk"]["status"] in ("ok", "warn")


def test_the_table_names_each_check() -> None:
    code, out, _ = _doctor()
    assert code == 0
    for word in ("architecture", "CPU features", "memory", "onnxruntime", "profile it would "
                 "pick", "no check failed"):
        assert word in out


def test_a_missing_state_dir_fails_with_what_to_do(tmp_path: Path) -> None:
    code, found = _findings("--state-dir", str(tmp_path / "nope"))
    assert code == 1
    f = found["state directory"]
    assert f["status"] == "fail" and "does not exist" in f["detail"] and "--state-dir" in f["fix"]
    code, out, _ = _doctor("--state-dir", str(tmp_path / "nope"))
    assert code == 1 and "1 check(s) failed" in out


def test_a_corrupt_database_and_a_readable_token_are_reported(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "state.db").write_bytes(b"this is not an SQLite database, " * 200)
    token = state / "management.token"
    token.write_text("secret\n")
    token.chmod(0o644)
    code, found = _findings("--state-dir", str(state))
    assert code == 1
    assert found["state.db"]["status"] == "fail" and "move" in found["state.db"]["fix"]
    assert found["management.token"]["status"] == "warn"
    assert found["management.token"]["fix"] == f"chmod 600 {token}"
    assert (state / "state.db").read_bytes().startswith(b"this is not")  # read-only


def test_cpu_flags_of_both_architectures() -> None:
    x86 = "processor : 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_vnni\n"
    arm = "processor : 0\nFeatures\t: fp asimd evtstrm asimddp\n"
    assert {"avx2", "avx512_vnni"} <= cpu_flags(x86)
    assert {"asimd", "asimddp"} <= cpu_flags(arm)
    assert cpu_flags("") == set()
