#!/usr/bin/env bash
# Installs every Debian package that building, testing and running Weft needs, and the npm
# packages that validate the Kubernetes manifests (tools/k8s). Idempotent: a second run installs
# nothing. Pass --bench to add the packages the benchmarks compare against.
set -euo pipefail

packages=(
  bazel-bootstrap bazel-platforms bazel-skylib
  g++ pkg-config
  protobuf-compiler libprotobuf-dev protobuf-compiler-grpc libgrpc++-dev libgrpc-dev
  libabsl-dev libspdlog-dev libfmt-dev libyaml-cpp-dev nlohmann-json3-dev
  libgloo-dev libopenblas-dev libsqlite3-dev libssl-dev libsystemd-dev libmicrohttpd-dev
  libcpp-httplib-dev libgtest-dev libgmock-dev
  openssl
  # The Python client (python/) and its test: Debian's python3 and its gRPC, protobuf and numpy
  # (the test's float64 reference).
  python3 python3-grpcio python3-protobuf python3-numpy
)
if [[ "${1:-}" == "--bench" ]]; then
  packages+=(python3-torch python3-matplotlib time bc)
fi
# node and npm for the manifests' validator: Debian's, only where PATH has no node and npm
# already (Debian's npm would conflict with a Node.js that bundles its own, as NodeSource's does).
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  packages+=(nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "setup: all ${#packages[@]} packages present"
else
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The npm packages of tools/k8s exactly as package-lock.json pins them (npm ci), unless
# node_modules was installed from this very lock: a copy of the lock marks that it was, and
# //deploy/kubernetes:manifests_test checks the same copy.
k8s="$(dirname "$0")/k8s"
if cmp -s "$k8s/package-lock.json" "$k8s/node_modules/.weft-package-lock.json"; then
  echo "setup: tools/k8s/node_modules matches its package-lock.json"
else
  echo "setup: installing tools/k8s/node_modules (npm ci)"
  # The packages declare Node.js 22; they run on 20 and 18 (Debian's), so npm's warning is muted.
  (cd "$k8s" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
  cp "$k8s/package-lock.json" "$k8s/node_modules/.weft-package-lock.json"
fi
