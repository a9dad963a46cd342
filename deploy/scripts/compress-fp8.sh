#!/usr/bin/env bash
# Step 2: an FP8_DYNAMIC copy of the checkpoint, made by llmcompressor in a virtual environment of its
# own (.venv-fp8): llmcompressor pins compressed-tensors apart from vLLM's. Prints both checkpoints' sizes.
#   deploy/scripts/compress-fp8.sh [SRC] [DST]   (default: var/models/original -> var/models/fp8)
# The first run installs torch and llmcompressor (~50 s and 1.5 GB with the CPU torch).
# shellcheck source=deploy/scripts/lib.sh
source "$(dirname "$0")/lib.sh"
src=${1:-$MODELS/original}
dst=${2:-$MODELS/fp8}
# Checked before the 1.5 GB install: `make run`'s model is var/models/default, not this script's default.
if [ ! -f "$src/config.json" ]; then
  echo "compress-fp8.sh: $src holds no model (no config.json); name the folder to copy, e.g." \
    "deploy/scripts/compress-fp8.sh var/models/default var/models/fp8" >&2
  exit 2
fi
venv=${FP8_VENV:-$ROOT/.venv-fp8}
requirements=$ROOT/deploy/fp8/requirements.txt

if ! cmp -s "$requirements" "$venv/.installed" 2>/dev/null; then
  echo "installing llmcompressor into $venv"
  "${PYTHON:-python3}" -m venv --clear "$venv"
  "$venv/bin/pip" install --quiet --upgrade pip
  # torch first, alone: left to llmcompressor's range, pip would take a CUDA build even on a CPU machine.
  "$venv/bin/pip" install --quiet "$(grep -E '^torch==' "$requirements" | cut -d' ' -f1)"
  "$venv/bin/pip" install --quiet -r "$requirements"
  cp "$requirements" "$venv/.installed"
fi
"$venv/bin/python" "$ROOT/deploy/fp8/compress.py" "$src" "$dst"
