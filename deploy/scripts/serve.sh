#!/usr/bin/env bash
# Step 3: serve one variant. Both go through `classroom backend start`, so they run with the same flags
# and served model name (service/local/vllm_server/flags.py); only the model folder differs.
#   deploy/scripts/serve.sh original|fp8
# Address: CLASSROOM_BACKEND__BASE_URL (default http://127.0.0.1:8100/v1). Stop: `classroom backend stop`.
# shellcheck source=deploy/scripts/lib.sh
source "$(dirname "$0")/lib.sh"
variant=${1:?usage: serve.sh original|fp8}
case $variant in original | fp8) ;; *) echo "variant: original or fp8, not $variant" >&2; exit 2 ;; esac
folder=$MODELS/$variant
if [ ! -f "$folder/config.json" ]; then
  echo "no model in $folder: run deploy/scripts/download.sh (original) or compress-fp8.sh (fp8) first" >&2
  exit 1
fi
"$CLASSROOM" backend start --model-dir "$folder"
