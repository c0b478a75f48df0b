#!/usr/bin/env bash
# Install a headless Chromium for the browser tests (tests/report, marker `browser`).
# Idempotent: does nothing when a Chromium is already on PATH or at /usr/bin/chromium.
set -euo pipefail
if [ -x /usr/bin/chromium ] || command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
    echo "chromium already installed: $(command -v chromium || command -v chromium-browser || echo /usr/bin/chromium)"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install_chromium.sh: apt-get not found; install Chromium by hand (browser tests will be skipped)" >&2
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends chromium
