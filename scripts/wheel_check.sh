#!/usr/bin/env bash
# Build the wheel and the sdist, hold both to their declared file lists (no stray files, the
# LICENSE in each), install the wheel (not the checkout) into clean virtualenvs -- the core
# alone, then every extra -- run the quick-starts against it, and type-check a consumer through
# the wheel's py.typed.
# Usage: scripts/wheel_check.sh DEV_VENV   (a virtualenv that has `build` and `mypy`)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/wheel_env.sh
dev="$(cd "${1:-.venv}" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
start=$SECONDS

build_dist "$dev/bin/python" "$work/dist"
wheel="$(ls "$work"/dist/lifecycle_machines-*.whl)"
sdist="$(ls "$work"/dist/lifecycle_machines-*.tar.gz)"
echo "built $(basename "$wheel") and $(basename "$sdist")"

# Exactly the declared files: tracked sources, LICENSE, py.typed; nothing a local run left.
"$dev/bin/python" scripts/dist_contents.py "$wheel" "$sdist"

# The core alone (no extra): the package imports and the controller quick-start runs.
make_env python3 "$work/core"
pip_quiet "$work/core" "$wheel"
from_wheel "$work/core"
mkdir "$work/core-qs" && cp examples/quickstart_controller.py "$work/core-qs/"
(cd "$work/core-qs" && "$work/core/bin/python" quickstart_controller.py >/dev/null)
echo "core install: ok"

# Every extra: the three quick-starts.
make_env python3 "$work/venv"
pip_quiet "$work/venv" "$wheel[all]" pytest
quickstarts "$work/venv" "$work/qs"

# A typed consumer: mypy --strict sees the wheel's annotations through py.typed.
cat > "$work/consumer.py" <<'PY'
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
(cd "$work" && "$dev/bin/mypy" --strict --no-incremental --python-executable venv/bin/python consumer.py)
echo "wheel check: ok in $((SECONDS - start)) s"
