#!/usr/bin/env bash
# vLLM's arguments and environment for containers (docker compose and Kubernetes), written from
# service/local/vllm_server/flags.py so that no deploy file holds a copy of them. In a container vLLM listens on
# all interfaces on port 8000 and finds its model, either variant, at /models/current.
#   deploy/scripts/vllm-env.sh [OUT]     (default: deploy/vllm.env, read by compose and k8s-apply.sh)
# shellcheck source=deploy/scripts/lib.sh
source "$(dirname "$0")/lib.sh"
out=${1:-$ROOT/deploy/vllm.env}
export CLASSROOM_BACKEND__BASE_URL=http://0.0.0.0:8000/v1
{
  echo "# Written by deploy/scripts/vllm-env.sh from service/local/vllm_server/flags.py; do not edit."
  # One line of arguments, split on spaces by the containers' shell: no argument may hold a space.
  echo "VLLM_SERVE_ARGS=$("$CLASSROOM" backend flags --device gpu --model-dir /models/current)"
  "$CLASSROOM" backend flags --device gpu --env
} >"$out"
echo "wrote $out"
