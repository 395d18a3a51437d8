#!/usr/bin/env bash
# Build the wheel and the sdist, install the wheel (not the checkout) into a clean virtualenv,
# run the quick-starts against it, and type-check a consumer through the wheel's py.typed.
# Usage: scripts/wheel_check.sh DEV_VENV   (a virtualenv that has `build` and `mypy`)
set -euo pipefail
cd "$(dirname "$0")/.."
dev="$(cd "${1:-.venv}" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

"$dev/bin/python" -m build --outdir "$work/dist" . >"$work/build.log" 2>&1 || {
    cat "$work/build.log"; exit 1; }
wheel="$(ls "$work"/dist/lifecycle-*.whl)"
sdist="$(ls "$work"/dist/lifecycle-*.tar.gz)"
echo "built $(basename "$wheel") and $(basename "$sdist")"

# The sdist must hold what a build from it needs, and nothing outside the repository.
listing="$(tar -tzf "$sdist")"
grep -q 'src/lifecycle/py.typed$' <<<"$listing" || { echo "sdist lacks py.typed"; exit 1; }

python3 -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet --upgrade pip
"$work/venv/bin/pip" install --quiet "$wheel[testing]" pytest
"$work/venv/bin/python" -c 'import sys, zipfile; sys.exit("lifecycle/py.typed" not in zipfile.ZipFile(sys.argv[1]).namelist())' "$wheel" \
    || { echo "wheel lacks py.typed"; exit 1; }

# Run from a folder outside the checkout, so `import lifecycle` can only find the wheel.
cp examples/quickstart_controller.py examples/quickstart_property_test.py "$work/"
cd "$work"
where="$(venv/bin/python -c 'import lifecycle, os; print(os.path.dirname(lifecycle.__file__))')"
case "$where" in
    "$work"/venv/*) ;;
    *) echo "lifecycle imported from $where, not from the wheel"; exit 1 ;;
esac
venv/bin/python quickstart_controller.py >/dev/null
venv/bin/python -m pytest -q -p no:cacheprovider quickstart_property_test.py
venv/bin/lifecycle machines >/dev/null
venv/bin/lifecycle --help >/dev/null

# A typed consumer: mypy --strict sees the wheel's annotations through py.typed.
cat > consumer.py <<'PY'
from datetime import UTC, datetime

from lifecycle import MemoryEmitter, ObjectRef, Outcome, Runner
from lifecycle.machines.pod import CreateRequested

runner = Runner(emitters=[MemoryEmitter()])
result = runner.observe(
    ObjectRef("Pod", "ml", "p", uid="u"), CreateRequested(at=datetime.now(UTC), pool="gpu")
)
outcome: Outcome = result.outcome
version: int = result.version
PY
"$dev/bin/mypy" --strict --no-incremental --python-executable venv/bin/python consumer.py
echo "wheel check: ok"
