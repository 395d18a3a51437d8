#!/usr/bin/env bash
# The lowest declared versions: install the wheel with every extra into a clean virtualenv under
# `name==floor` constraints for each direct dependency (written from pyproject.toml by
# scripts/floors.py, so they cannot drift from what is declared), check that pip installed
# exactly those, then run the quick-starts and the core slice of the suite against it.
# Usage: scripts/floors.sh DEV_VENV [VERSION]
#   DEV_VENV: a virtualenv with `build`; VERSION: the Python (default 3.11; `make floors` gives
#   the oldest supported one: a floor is a promise to the oldest environment a user may have).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/wheel_env.sh
dev="$(cd "${1:-.venv}" && pwd)"
python="$(find_python "${2:-3.11}")"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
start=$SECONDS

python3 scripts/floors.py >"$work/floors.txt"
build_dist "$dev/bin/python" "$work/dist"
wheel="$(ls "$work"/dist/lifecycle_machines-*.whl)"

make_env "$python" "$work/venv"
# pytest is a test tool, not a dependency: it takes its newest release.
pip_quiet "$work/venv" -c "$work/floors.txt" "$wheel[all]" pytest
if grep -i "yanked" "$work/venv.pip.log"; then
    echo "a floor is a yanked release: declare the next one"; exit 1
fi
"$work/venv/bin/python" scripts/floors.py --verify "$work/floors.txt"
echo "floors installed in $((SECONDS - start)) s:" $(tr '\n' ' ' <"$work/floors.txt")

quickstarts "$work/venv" "$work/qs"

# The core slice: the runner, tables, machines, stores (SQLite, memory, PostgreSQL), emitters,
# the CLI and the examples; run from the checkout, importing the wheel (src/ is not on the
# path: tests/ is a package, so pytest puts only the repository root there).
# One path a line in scripts/floors-slice.txt: each direct dependency is exercised there. A
# fixed Hypothesis seed: a failure here is the floor's, and the same on every run (make test
# and test-pythons search with fresh seeds).
"$work/venv/bin/python" -m pytest -q -p no:cacheprovider -x --hypothesis-seed=24 \
    $(grep -v "^#" scripts/floors-slice.txt)
echo "floors: ok in $((SECONDS - start)) s"
