#!/usr/bin/env bash
# arm64 for real, under qemu-user emulation (Debian's qemu-user-static and debootstrap).
#
# Builds (once, cached) a Debian bookworm arm64 root file system, installs the toolkit's
# [agent] extra in it from the package index's aarch64 wheels (downloaded on the host), then
# runs tests/parity/test_arm64_emulated.py from the host: parity on the arm64 kernels (fp32 and
# int8 bundles, `edge-agent check`), and an agent in the root file system (chroot, loopback)
# that deploys, checks parity on the device, serves, hot-swaps and rolls back.
#
# Needs root (chroot, mounts, binfmt_misc) and a Linux kernel with binfmt_misc.
# Measured on the 2-core dev machine (shared, busy): debootstrap 521 s, aarch64 wheels and the
# venv under emulation 210 s (both cached in EDGE_ARM64_CACHE: 290 MB + 510 MB of tars), then
# each run 111 s (unpack 7 s, toolkit wheel 25 s, the tests 56 s).
# Usage: sudo scripts/arm64-check.sh [--if-possible]   (EDGE_ARM64_CACHE: the cache directory)
#   --if-possible: where this machine cannot do it (not root, no binfmt_misc, no network to the
#   package registries, chroot refused), print "SKIPPED: why" and exit 0; a failing test still
#   fails. scripts/test.sh runs it so when it runs as root (CI).
NAME=arm64-check
CACHE=${EDGE_ARM64_CACHE:-/var/cache/edge-toolkit-arm64}
source "$(dirname "${BASH_SOURCE[0]}")/_target_check.sh"

need_root "chroot, mounts, binfmt_misc"
if ! command -v debootstrap >/dev/null || [ ! -x /usr/libexec/qemu-binfmt/aarch64-binfmt-P ]; then
    install_packages qemu-user-static debootstrap
fi

# -- binfmt_misc: run aarch64 ELF files with qemu (flag F: the interpreter is opened now, so
#    it works inside the chroot without a copy there)
BINFMT=/proc/sys/fs/binfmt_misc
if [ ! -e "$BINFMT/register" ]; then
    mount -t binfmt_misc binfmt_misc "$BINFMT" || cant "cannot mount binfmt_misc on $BINFMT"
fi
if [ ! -e "$BINFMT/qemu-aarch64" ]; then
    say "registering qemu-aarch64 with binfmt_misc"
    cat /usr/lib/binfmt.d/qemu-aarch64.conf > "$BINFMT/register" \
        || cant "cannot register qemu-aarch64 with binfmt_misc"
fi

# -- the root file system with python3 (cached as a tar: unpacking takes seconds)
mkdir -p "$CACHE"
BASE="$CACHE/rootfs-$SUITE-arm64.tar"
bootstrap_rootfs "$BASE" --arch=arm64 --variant=minbase \
    --include=python3,python3-venv,ca-certificates

# -- aarch64 wheels of the [agent] extra's dependencies, downloaded on the host; the venv in the
#    root file system is cached per pyproject.toml (the toolkit itself is installed each run)
KEY=$(sha256sum "$HERE/pyproject.toml" | cut -c1-16)
WHEELS="$CACHE/wheels-$KEY"
READY="$CACHE/rootfs-$SUITE-arm64-venv-$KEY.tar"
TOOLKIT=$(mktemp -d /var/tmp/edge-arm64-wheel.XXXXXX)
"$PY" -m pip wheel --no-deps -q -w "$TOOLKIT" "$HERE"
if [ ! -f "$READY" ]; then
    say "downloading aarch64 wheels"
    rm -rf "$WHEELS" && mkdir -p "$WHEELS"
    download_agent_wheels "$WHEELS" "$TOOLKIT" manylinux2014_aarch64 manylinux_2_28_aarch64 \
        manylinux_2_34_aarch64
    BUILD=$(mktemp -d /var/tmp/edge-arm64-build.XXXXXX)
    tar -C "$BUILD" -xf "$BASE"
    mkdir -p "$BUILD/wheels" && cp "$WHEELS"/*.whl "$BUILD/wheels/"
    say "creating the venv and installing the wheels under emulation"
    chroot "$BUILD" /bin/true || cant "cannot run aarch64 programs in a chroot here"
    chroot "$BUILD" /usr/bin/python3 -m venv /opt/edge
    chroot "$BUILD" /bin/sh -c '/opt/edge/bin/pip install -q --no-index /wheels/*.whl' \
        || die "pip install in the arm64 root file system failed"
    rm -rf "$BUILD/wheels"
    tar -C "$BUILD" -cf "$READY.tmp" . && mv "$READY.tmp" "$READY"
    rm -rf "$BUILD"
fi

ROOT=$(mktemp -d /var/tmp/edge-arm64.XXXXXX)
cleanup() {
    umount "$ROOT/proc/cpuinfo" 2>/dev/null || true
    umount "$ROOT/proc" 2>/dev/null || true
    umount "$ROOT/dev" 2>/dev/null || true
    rm -rf --one-file-system "$ROOT" "$TOOLKIT"
}
trap cleanup EXIT
say "unpacking the root file system"
tar -C "$ROOT" -xf "$READY"
cp "$TOOLKIT"/edgeship-*.whl "$ROOT/tmp/"
say "installing this checkout's toolkit wheel (pure Python) under emulation"
chroot "$ROOT" /bin/sh -c '/opt/edge/bin/pip install -q --no-index --no-deps /tmp/edgeship-*.whl'
mount -t proc proc "$ROOT/proc" || cant "cannot mount /proc in the chroot"
mount --bind /dev "$ROOT/dev"
# ONNX Runtime reads /proc/cpuinfo at import; the host's x86 one crashes it under qemu 7.2
CPUINFO="$CACHE/cpuinfo-aarch64"
for i in $(seq 0 $(( $(nproc) - 1 ))); do
    printf 'processor\t: %s\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 cpuid\nCPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: 0xd08\nCPU revision\t: 3\n\n' "$i"
done > "$CPUINFO"
mount --bind "$CPUINFO" "$ROOT/proc/cpuinfo"

say "running tests/parity/test_arm64_emulated.py"
cd "$HERE"
EDGE_ARM64_ROOT="$ROOT" "$PY" -m pytest tests/parity/test_arm64_emulated.py -v -s -rs \
    -p no:cacheprovider --timeout 3600
say "done"
