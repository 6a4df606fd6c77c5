#!/usr/bin/env bash
# Validates the Kubernetes manifests offline against the Kubernetes API
# schemas (kubernetes-validate, strict: unknown fields fail), as rendered
# by kustomize. No cluster needed.
#
#   scripts/check-manifests.sh
set -euo pipefail
cd "$(dirname "$0")/.."
venv="$HOME/.cache/sluice/venv-tools"
version=1.37.0
if ! "$venv/bin/kubernetes-validate" --version 2>/dev/null | grep -q "$version"; then
  [ -x "$venv/bin/pip" ] || python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "kubernetes-validate==$version"
fi
rendered=$(mktemp --suffix .yaml)
trap 'rm -f "$rendered"' EXIT
for dir in deploy/kubernetes deploy/kubernetes/scale-out; do
  if command -v kubectl >/dev/null; then
    kubectl kustomize "$dir" > "$rendered"
  else
    # Without kubectl: the resources kustomization.yaml lists, as they are.
    for file in $(sed -n 's/^  - \(.*\.yaml\)$/\1/p' "$dir/kustomization.yaml"); do
      cat "$dir/$file"; echo "---"
    done > "$rendered"
  fi
  "$venv/bin/kubernetes-validate" --strict --quiet "$rendered"
  echo "manifests: $dir valid (Kubernetes $version schemas, strict)"
done
# Examples kept beside the kustomizations.
for example in deploy/kubernetes/scale-out/hpa-consumer-lag.yaml; do
  "$venv/bin/kubernetes-validate" --strict --quiet "$example"
  echo "manifests: $example valid"
done
