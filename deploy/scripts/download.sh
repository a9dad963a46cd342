#!/usr/bin/env bash
# Step 1: the checkpoint. Qwen2.5-Instruct from the model hub; where the hub cannot be reached, the
# offline stand-in (real tokenizer and shapes, random weights), said in a banner no one can miss.
#   deploy/scripts/download.sh [SIZE] [DEST]     (default: 1.5b into var/models/original)
# shellcheck source=deploy/scripts/lib.sh
source "$(dirname "$0")/lib.sh"
"$CLASSROOM" model prepare --size "${1:-1.5b}" --dest "${2:-$MODELS/original}"
