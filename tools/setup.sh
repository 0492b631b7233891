#!/usr/bin/env bash
# Installs every Debian package that building, testing and running Weft needs. Idempotent: a
# second run installs nothing. Pass --bench to add the packages the benchmarks compare against.
set -euo pipefail

packages=(
  bazel-bootstrap bazel-platforms bazel-skylib
  g++ pkg-config
  protobuf-compiler libprotobuf-dev protobuf-compiler-grpc libgrpc++-dev libgrpc-dev
  libabsl-dev libspdlog-dev libfmt-dev libyaml-cpp-dev nlohmann-json3-dev
  libgloo-dev libopenblas-dev libsqlite3-dev libssl-dev libsystemd-dev libcpp-httplib-dev
  libgtest-dev libgmock-dev
  openssl
  # The Python client (python/) and its test: Debian's python3 and its gRPC, protobuf, YAML and
  # numpy (the test's float64 reference).
  python3 python3-grpcio python3-protobuf python3-yaml python3-numpy
)
if [[ "${1:-}" == "--bench" ]]; then
  packages+=(python3-torch time bc)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
[[ $(id -u) -eq 0 ]] || sudo="sudo"
echo "setup: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
