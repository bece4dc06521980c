#!/usr/bin/env bash
# Sourced by scripts/test.sh: install the system programs some tests drive, when missing and when
# we may (root, apt-get present). Each test that needs one skips with the reason where it is absent.
#   tmux              the terminal smoke test of the console
#   systemd-analyze   the unit-file check (package systemd)
#   docker-registry   a real OCI registry (the CNCF distribution server) for push/pull/deploy-by-reference
#   prometheus        a real Prometheus server that scrapes the agent's /metrics
#   mosquitto         a real MQTT broker for the fleet tests and bench (tests/fleet/)
#   systemd-nspawn    boots a Debian root file system to run the agent's unit under systemd
#   debootstrap       builds that root file system (package systemd-container for nspawn)
#   libb64-0d         a library Triton's perf_analyzer loads (tests/conformance/test_perf_analyzer.py)
# Set EDGE_SKIP_SYSTEM_DEPS=1 to skip this step.
if [ "${EDGE_SKIP_SYSTEM_DEPS:-0}" != 1 ]; then
    _missing=()
    command -v tmux >/dev/null 2>&1 || _missing+=(tmux)
    command -v systemd-analyze >/dev/null 2>&1 || _missing+=(systemd)
    command -v docker-registry >/dev/null 2>&1 || _missing+=(docker-registry)
    command -v prometheus >/dev/null 2>&1 || _missing+=(prometheus)
    command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ] || _missing+=(mosquitto)
    command -v systemd-nspawn >/dev/null 2>&1 || _missing+=(systemd-container)
    command -v debootstrap >/dev/null 2>&1 || _missing+=(debootstrap)
    [ -e /usr/lib/x86_64-linux-gnu/libb64.so.0d ] || [ -e /usr/lib/aarch64-linux-gnu/libb64.so.0d ] \
        || _missing+=(libb64-0d)
    if [ ${#_missing[@]} -gt 0 ]; then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
            echo "==> installing system packages: ${_missing[*]}"
            # --no-install-recommends and policy-rc.d: install the programs, start no services.
            _prc=/usr/sbin/policy-rc.d
            _had_prc=0; [ -e "$_prc" ] && _had_prc=1
            [ "$_had_prc" = 1 ] || printf '#!/bin/sh\nexit 101\n' > "$_prc"
            chmod +x "$_prc" 2>/dev/null || true
            if ! (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
                    --no-install-recommends "${_missing[@]}") >/dev/null 2>&1; then
                echo "note: could not install ${_missing[*]}; the tests that need them will skip"
            fi
            [ "$_had_prc" = 1 ] || rm -f "$_prc"
        else
            echo "note: missing ${_missing[*]} (not root or no apt-get); the tests that need them will skip"
        fi
    fi
    unset _missing _prc _had_prc
fi
