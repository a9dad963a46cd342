#!/usr/bin/env bash
# The scaled case on Kubernetes: vLLM's flags as a ConfigMap (from vllm-env.sh), then deploy/k8s/.
#   deploy/scripts/k8s-apply.sh [NAMESPACE]    (default: classroom; needs kubectl and a cluster)
# shellcheck source=deploy/scripts/lib.sh
source "$(dirname "$0")/lib.sh"
ns=${1:-classroom}
env_file=$ROOT/deploy/vllm.env
"$ROOT/deploy/scripts/vllm-env.sh" "$env_file"
kubectl create namespace "$ns" --dry-run=client -o yaml | kubectl apply -f -
kubectl -n "$ns" create configmap vllm-env --from-env-file="$env_file" --dry-run=client -o yaml |
  kubectl -n "$ns" apply -f -
kubectl -n "$ns" apply -f "$ROOT/deploy/k8s/"
# A changed ConfigMap reaches running pods only through a restart.
kubectl -n "$ns" rollout restart deployment -l app.kubernetes.io/component=vllm
