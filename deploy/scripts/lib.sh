# Sourced by the deploy scripts: where things are, and the `classroom` command they all go through.
# shellcheck shell=bash
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# Model folders of the two variants: $MODELS/original and $MODELS/fp8.
MODELS=${CLASSROOM_MODELS:-$ROOT/var/models}

# The project's command: the one on PATH, else the checkout's own virtual environment (`make setup`).
if command -v classroom >/dev/null 2>&1; then
  CLASSROOM=$(command -v classroom)
elif [ -x "$ROOT/.venv/bin/classroom" ]; then
  CLASSROOM=$ROOT/.venv/bin/classroom
else
  echo "no \`classroom\` command: run \`make setup\` in $ROOT first" >&2
  exit 1
fi
export ROOT MODELS CLASSROOM
