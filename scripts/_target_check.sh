# Sourced by scripts/arm64-check.sh and scripts/systemd-check.sh (set NAME first): the flags,
# paths and helpers both checks share.
#   --if-possible: where this machine cannot run the check, `cant` prints "SKIPPED: why" and
#   exits 0; a failing test still fails (`die`).
set -euo pipefail
IF_POSSIBLE=0
[ "${1:-}" = "--if-possible" ] && IF_POSSIBLE=1

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SUITE=bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
PY=${PYTHON:-$HERE/.venv/bin/python}
t0=$(date +%s)
say() { printf '==> [%4ss] %s\n' "$(( $(date +%s) - t0 ))" "$*"; }
die() { echo "$NAME: error: $*" >&2; exit 1; }
cant() {  # this machine cannot run the check (not a test failure)
    if [ "$IF_POSSIBLE" = 1 ]; then echo "$NAME: SKIPPED: $*"; exit 0; fi
    die "$*"
}

# need_root WHY: refuse (or skip) unless root
need_root() {
    [ "$(id -u)" -eq 0 ] || cant "needs root ($1); run it with sudo"
    [ -x "$PY" ] || die "$PY not found: run ./scripts/test.sh once (it creates .venv), or set PYTHON"
}

# install_packages PKG...: apt-get install them (an update first when the lists are stale)
install_packages() {
    say "installing $*"
    (apt-get install -y --no-install-recommends "$@" >/dev/null 2>&1 \
        || { apt-get update -qq && apt-get install -y --no-install-recommends "$@" \
             >/dev/null 2>&1; }) || cant "could not install $*"
}

# download_agent_wheels DIR TOOLKIT_WHEEL_DIR PLATFORM...: the [agent] extra's wheels (cp311)
download_agent_wheels() {
    local dir=$1 toolkit=$2
    shift 2
    local platforms=()
    for p in "$@"; do platforms+=(--platform "$p"); done
    "$PY" -m pip download -q -d "$dir" --only-binary=:all: --python-version 3.11 \
        --implementation cp --abi cp311 "${platforms[@]}" \
        "$(ls "$toolkit"/edgeship-*.whl)[agent]" \
        || cant "could not download the [agent] wheels (no network to the package index?)"
    rm -f "$dir"/edgeship-*.whl
}

# bootstrap_rootfs TAR DEBOOTSTRAP_ARG...: debootstrap $SUITE into a tar, once (cached)
bootstrap_rootfs() {
    local tar=$1
    shift
    [ -f "$tar" ] && return 0
    say "debootstrap $SUITE $* (several minutes)"
    rm -rf "$CACHE/root.build"
    debootstrap "$@" "$SUITE" "$CACHE/root.build" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 \
        || cant "debootstrap failed (no network to the Debian mirror?); see $CACHE/debootstrap.log"
    tar -C "$CACHE/root.build" -cf "$tar.tmp" . && mv "$tar.tmp" "$tar"
    rm -rf "$CACHE/root.build"
}
