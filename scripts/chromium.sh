#!/usr/bin/env bash
# Headless Chromium for `make docs-check` and tests/test_site_check.py (ADR 0137): Debian's
# chromium package, installed when it is missing. CI runs as root on a fresh machine; elsewhere
# without root, say what to install. The site check drives Chromium over its DevTools protocol,
# so no driver binary is needed.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "chromium.sh: Chromium is missing; install Debian's package: apt-get install chromium" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq chromium >/dev/null
chromium --version
