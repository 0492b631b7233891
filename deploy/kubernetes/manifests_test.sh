#!/usr/bin/env bash
# Runs manifests_test.mjs on the manifests given, with node and the npm packages of tools/k8s,
# which tools/setup.sh installs: without them the test fails rather than passing unchecked.
set -euo pipefail

modules=tools/k8s/node_modules
if ! command -v node >/dev/null; then
  echo "manifests_test: no node on PATH: run bash tools/setup.sh" >&2
  exit 1
fi
if ! cmp -s tools/k8s/package-lock.json "$modules/.weft-package-lock.json"; then
  echo "manifests_test: $modules is missing or was not installed from tools/k8s/package-lock.json:" \
    "run bash tools/setup.sh" >&2
  exit 1
fi
# The runfiles tree is a tree of symlinks: keep node resolving imports inside it, so that the
# test sees only what Bazel declared.
exec node --preserve-symlinks --preserve-symlinks-main deploy/kubernetes/manifests_test.mjs "$@"
