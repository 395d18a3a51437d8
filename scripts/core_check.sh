#!/usr/bin/env bash
# The core install (ADR 0136): build the wheel, install it with no extra into a clean
# virtualenv, then, with that interpreter (scripts/core_check.py): check that no optional SDK
# came with it, import every public module (each imports, or -- the few that cannot work
# without theirs -- raises MissingExtra naming its extra), run every README command that needs
# no extra, and check that each one that does exits 4 with one line naming the extra and its
# pip command once.
# Usage: scripts/core_check.sh DEV_VENV   (a virtualenv that has `build`)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/wheel_env.sh
dev="$(cd "${1:-.venv}" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
start=$SECONDS

build_dist "$dev/bin/python" "$work/dist"
wheel="$(ls "$work"/dist/lifecycle_machines-*.whl)"
make_env python3 "$work/core"
pip_quiet "$work/core" "$wheel"
from_wheel "$work/core"

# The script runs from the checkout (its README and examples); `import lifecycle` finds only
# the wheel (src/ is not on the path), and the commands run in a directory of their own.
"$work/core/bin/python" scripts/core_check.py imports
mkdir "$work/readme"
"$work/core/bin/python" scripts/core_check.py readme "$work/readme"
echo "core check: ok in $((SECONDS - start)) s"
