#!/usr/bin/env bash
# Quick-start, operator: record what a controller saw, then replay it anywhere, as often as needed.
set -euo pipefail
out="${1:-$(mktemp -d)}"                   # where the recording and the replay store go
[ -d "$out" ] || { echo "quickstart_operator.sh: $out: no such directory (omit it for a new one)" >&2; exit 2; }
out="$(cd "$out" && pwd)"                  # as given, from where it was given
cd "$(dirname "$0")/.."                    # the repository root

# 1. A controller records every observation as it runs (live: drop --fake, have a Modal token).
python examples/modal_controller.py --fake --pods 2 --record "$out/saw.jsonl"

# 2. Replay it: the same events, in order, with no provider and no cluster.
lifecycle replay "$out/saw.jsonl"

# 3. Into SQLite, keeping each object's final status (JSON Lines) for a closer look.
lifecycle replay "$out/saw.jsonl" --store "sqlite:///$out/saw.db" --format jsonl --final-status \
  | grep '"final":true' > "$out/final.jsonl"

# 4. A bundled trace with injected write faults: a conflict retried, failed writes redone by the
#    next pass (the Pod's rows declare no fallback, so none is sent).
lifecycle replay examples/traces/faults.jsonl

# 5. Where a row declares one, a failed write sends its fallback Warning, "(not written)".
lifecycle replay examples/traces/certification-fallback-then-transition.jsonl
