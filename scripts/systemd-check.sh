#!/usr/bin/env bash
# systemd for real: the agent's unit under systemd, in a Debian root file system booted with
# `systemd-nspawn --boot` (Debian's systemd-container and debootstrap).
#
# Builds (once, cached) a Debian bookworm amd64 root file system with systemd and python3,
# installs the toolkit's [agent] extra in a venv there (/opt/edge, from wheels downloaded on the
# host), then runs tests/reliability/test_systemd_nspawn.py from the host. The test boots the
# container, installs the unit with `edge-agent install-service` as the README says, and checks:
# Type=notify READY only when models serve, the watchdog restarting a hung agent, kill -9
# restarting it with the previous version serving, and SIGTERM draining.
#
# Needs root (debootstrap, systemd-nspawn). The container shares the host's network (loopback).
# Usage: sudo scripts/systemd-check.sh [--if-possible]  (EDGE_SYSTEMD_CACHE: the cache directory)
#   --if-possible: where this machine cannot do it (not root, no network to the package
#   registries, systemd-nspawn refused by the kernel or container), print "SKIPPED: why" and
#   exit 0; a failing test still fails. scripts/test.sh runs it so when it runs as root (CI).
NAME=systemd-check
CACHE=${EDGE_SYSTEMD_CACHE:-/var/cache/edge-toolkit-systemd}
source "$(dirname "${BASH_SOURCE[0]}")/_target_check.sh"

need_root "debootstrap, systemd-nspawn"
if ! command -v debootstrap >/dev/null || ! command -v systemd-nspawn >/dev/null; then
    install_packages systemd-container debootstrap
fi

mkdir -p "$CACHE"
BASE="$CACHE/rootfs-$SUITE-amd64-systemd.tar"
bootstrap_rootfs "$BASE" --variant=minbase \
    --include=systemd,systemd-sysv,dbus,python3,python3-venv,ca-certificates,procps

# the venv in the root file system, cached per pyproject.toml (the toolkit itself each run)
KEY=$(sha256sum "$HERE/pyproject.toml" | cut -c1-16)
READY="$CACHE/rootfs-$SUITE-amd64-systemd-venv-$KEY.tar"
TOOLKIT=$(mktemp -d /var/tmp/edge-systemd-wheel.XXXXXX)
"$PY" -m pip wheel --no-deps -q -w "$TOOLKIT" "$HERE"
if [ ! -f "$READY" ]; then
    say "downloading the [agent] wheels"
    WHEELS="$CACHE/wheels-$KEY"
    rm -rf "$WHEELS" && mkdir -p "$WHEELS"
    download_agent_wheels "$WHEELS" "$TOOLKIT" manylinux2014_x86_64 manylinux_2_28_x86_64 \
        manylinux_2_34_x86_64
    BUILD=$(mktemp -d /var/tmp/edge-systemd-build.XXXXXX)
    tar -C "$BUILD" -xf "$BASE"
    mkdir -p "$BUILD/wheels" && cp "$WHEELS"/*.whl "$BUILD/wheels/"
    say "creating the venv in the root file system"
    chroot "$BUILD" /usr/bin/python3 -m venv /opt/edge
    chroot "$BUILD" /bin/sh -c '/opt/edge/bin/pip install -q --no-index /wheels/*.whl' \
        || die "pip install in the root file system failed"
    rm -rf "$BUILD/wheels" "$WHEELS"
    tar -C "$BUILD" -cf "$READY.tmp" . && mv "$READY.tmp" "$READY"
    rm -rf "$BUILD"
fi

ROOT=$(mktemp -d /var/tmp/edge-systemd.XXXXXX)
cleanup() { rm -rf --one-file-system "$ROOT" "$TOOLKIT"; }
trap cleanup EXIT
say "unpacking the root file system"
tar -C "$ROOT" -xf "$READY"
cp "$TOOLKIT"/edgeship-*.whl "$ROOT/tmp/"
chroot "$ROOT" /bin/sh -c '/opt/edge/bin/pip install -q --no-index --no-deps /tmp/edgeship-*.whl'
rm -f "$ROOT"/tmp/edgeship-*.whl

# can this machine run a container at all? (a kernel or an outer container may refuse)
systemd-nspawn -D "$ROOT" --register=no --keep-unit -q /bin/true >"$CACHE/nspawn-probe.log" 2>&1 \
    || cant "systemd-nspawn cannot start a container here: $(tail -1 "$CACHE/nspawn-probe.log")"
say "running tests/reliability/test_systemd_nspawn.py"
cd "$HERE"
EDGE_NSPAWN_ROOT="$ROOT" "$PY" -m pytest tests/reliability/test_systemd_nspawn.py -v -s -rs \
    -p no:cacheprovider --timeout 1800
say "done"
