#!/usr/bin/env bash
# Each supported Python besides the one `make test` uses: a clean virtualenv from the wheel
# (every extra, and the development group for the suite's baselines and fakes), the quick-starts
# from outside the checkout, then the whole suite from the checkout, importing the wheel.
# Usage: scripts/pythons.sh DEV_VENV VERSION...   e.g. scripts/pythons.sh .venv 3.12 3.13
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/wheel_env.sh
dev="$(cd "${1:?usage: pythons.sh DEV_VENV VERSION...}" && pwd)"
shift
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
start=$SECONDS

# Find every interpreter first: a missing one fails before anything long runs.
declare -A pythons
for version in "$@"; do
    pythons[$version]="$(find_python "$version")"
done
build_dist "$dev/bin/python" "$work/dist"
wheel="$(ls "$work"/dist/lifecycle_machines-*.whl)"

for version in "$@"; do
    began=$SECONDS
    venv="$work/venv-$version"
    make_env "${pythons[$version]}" "$venv"
    pip_quiet "$venv" "$wheel[all]" --group dev
    echo "Python $version: installed in $((SECONDS - began)) s"
    quickstarts "$venv" "$work/qs-$version"
    # From the checkout: tests/ is a package, so pytest puts the repository root on the path,
    # never src/; `import lifecycle` finds the wheel (quickstarts checked where it resolves).
    "$venv/bin/python" -m pytest -q -p no:cacheprovider -n auto
    echo "Python $version: ok in $((SECONDS - began)) s"
    rm -rf "$venv"
done
echo "pythons $*: ok in $((SECONDS - start)) s"
