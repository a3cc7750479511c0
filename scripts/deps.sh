#!/usr/bin/env bash
# Installs the Debian packages VoiceCat builds, tests and demos with, if missing.
# Safe to run repeatedly; does nothing when everything is present.
set -euo pipefail

# python3-venv, python3-pip: py-test makes fresh venvs and installs PyPI packages into them;
# python3-dev, gcc: PyPI's pesq (the quality check of py-test, make bench-quality) builds from source.
# systemd: systemd-analyze, which checks the server's unit in `make test`; binutils: readelf for the same check.
pkgs=(libopus-dev libasound2-dev libsodium-dev libspeexdsp-dev pkg-config espeak-ng sox python3-pytest
      python3-venv python3-pip python3-dev gcc systemd binutils)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "deps: installing ${missing[*]}"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if ! command -v swift >/dev/null 2>&1; then
    if [ -x /opt/swift/usr/bin/swift ]; then
        echo "deps: swift is at /opt/swift/usr/bin; add it to PATH" >&2
    else
        echo "deps: the Swift toolchain (6.x) is required and is not installed" >&2
    fi
    exit 1
fi
