"""Render and install the agent's systemd unit from the template systemd/edge-agent.service."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from edge_agent.errors import ServiceInstallError

UNIT_NAME = "edge-agent.service"
DEFAULT_UNIT_DIR = Path("/etc/systemd/system")
_GPU_GROUPS = "video render"


def template_path() -> Path:
    """Where the unit template lives: inside the wheel, or in the source checkout."""
    here = Path(__file__).resolve().parent.parent  # edge_agent/
    for candidate in (here / "systemd" / UNIT_NAME, here.parent / "systemd" / UNIT_NAME):
        if candidate.is_file():
            return candidate
    raise ServiceInstallError(
        f"the unit template {UNIT_NAME} is missing from the installation (looked in "
        f"{here / 'systemd'} and {here.parent / 'systemd'}); reinstall edgeship")


def render_unit(executable: str | os.PathLike[str], config_path: str | os.PathLike[str],
                user: str | None = None, *, gpu: bool = False) -> str:
    """The unit file text for running ``<executable> serve --config <config_path>``.

    ``user`` None runs as a transient ``DynamicUser``; a name runs as that (existing) system
    user. ``gpu`` keeps the host's /dev (no ``PrivateDevices``) and adds the video/render groups,
    which CUDA/TensorRT devices need.
    """
    exe, cfg = str(executable), str(config_path)
    for label, value in (("executable", exe), ("config path", cfg)):
        if not os.path.isabs(value):
            raise ServiceInstallError(f"the {label} must be an absolute path, got {value!r}")
        if any(c.isspace() for c in value) or "%" in value or "$" in value:
            raise ServiceInstallError(
                f"the {label} {value!r} contains whitespace, '%' or '$'; install to a plain path")
    if user is not None and not _valid_user(user):
        raise ServiceInstallError(f"{user!r} is not a valid system user name")
    template = template_path().read_text()
    body = template[template.index("[Unit]"):]  # drop the template's own header comment
    lines: list[str] = []
    for line in body.splitlines():
        if line == "DynamicUser=yes" and user is not None:
            lines += [f"User={user}", f"Group={user}"]
            continue
        if line == "PrivateDevices=yes" and gpu:
            lines += ["# PrivateDevices off: the GPU device nodes are needed.",
                      f"SupplementaryGroups={_GPU_GROUPS}"]
            continue
        lines.append(line.replace("@EXECUTABLE@", exe).replace("@CONFIG@", cfg))
    text = "\n".join(lines) + "\n"
    if "@" in text.replace("@system-service", ""):
        raise ServiceInstallError("internal error: unrendered placeholder left in the unit")
    return text


def install_service(executable: str | os.PathLike[str], config_path: str | os.PathLike[str],
                    user: str | None = None, *, gpu: bool = False,
                    unit_dir: str | os.PathLike[str] = DEFAULT_UNIT_DIR,
                    daemon_reload: bool = True) -> Path:
    """Write the rendered unit to ``unit_dir/edge-agent.service`` (atomically) and reload systemd.

    Returns the unit's path. ``daemon_reload`` runs ``systemctl daemon-reload`` when systemctl
    exists. Enabling and starting is left to the operator (``systemctl enable --now edge-agent``).
    """
    text = render_unit(executable, config_path, user, gpu=gpu)
    target_dir = Path(unit_dir)
    target = target_dir / UNIT_NAME
    tmp = target_dir / f".{UNIT_NAME}.tmp"
    try:
        target_dir.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text)
        tmp.chmod(0o644)
        os.replace(tmp, target)
    except PermissionError as exc:
        raise ServiceInstallError(
            f"cannot write {target}: permission denied; run install-service as root "
            "(sudo) or pass a unit directory you can write") from exc
    except OSError as exc:
        raise ServiceInstallError(f"cannot write {target}: {exc.strerror or exc}") from exc
    systemctl = shutil.which("systemctl")
    if daemon_reload and systemctl:
        done = subprocess.run([systemctl, "daemon-reload"], capture_output=True, text=True,
                              check=False)
        if done.returncode != 0:
            raise ServiceInstallError(
                f"wrote {target}, but 'systemctl daemon-reload' failed: "
                f"{(done.stderr or done.stdout).strip() or done.returncode}")
    return target


def _valid_user(name: str) -> bool:
    return (0 < len(name) <= 32 and (name[0].isalpha() or name[0] == "_")
            and all(c.isalnum() or c in "-_." for c in name))
