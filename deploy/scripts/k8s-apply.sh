#!/usr/bin/env bash
# The scaled case on Kubernetes: vLLM's flags (vllm-env.sh) into deploy/k8s/vllm.env, the operator's token as a
# Secret where there is none yet, then `kubectl apply -k deploy/k8s/` (kustomization.yaml).
#   deploy/scripts/k8s-apply.sh [NAMESPACE]    (default: classroom; needs kubectl and a cluster)
# Nothing is restarted by hand: the ConfigMaps' names carry a hash of their content, so an apply that changes
# nothing changes no pod template, and a changed flag or backends file rolls only the pods that read it.
# shellcheck source=deploy/scripts/lib.sh
source "$(dirname "$0")/lib.sh"
ns=${1:-classroom}
k8s=$ROOT/deploy/k8s
"$ROOT/deploy/scripts/vllm-env.sh" "$k8s/vllm.env"
kubectl create namespace "$ns" --dry-run=client -o yaml | kubectl apply -f -
# Made once, random, and kept: a new token at every apply would lock operators out and roll the service.
if ! kubectl -n "$ns" get secret classroom-operator >/dev/null 2>&1; then
  kubectl -n "$ns" create secret generic classroom-operator \
    --from-literal=token="$(python3 -c 'import secrets; print(secrets.token_urlsafe(32))')"
  echo "operator token: kubectl -n $ns get secret classroom-operator -o jsonpath='{.data.token}' | base64 -d"
fi
kubectl -n "$ns" apply -k "$k8s"
