#!/usr/bin/env bash
# A relocatable copy of built binaries: each under OUT/bazel-bin/<its workspace path> (so that
# weftctl finds its daemons, and tests find theirs through tests/process.h's BinaryPath, exactly
# as in a checkout), and every shared library they load beyond glibc, the NVIDIA driver and the
# CUDA toolkit in OUT/lib. Run a bundled binary with LD_LIBRARY_PATH=OUT/lib (plus the CUDA
# toolkit's lib64 and NCCL's folder on a GPU machine). The CUDA toolkit's libraries (cudart,
# cuBLAS, cuBLASLt, NCCL: about 800 MB) are left out: a GPU machine has them.
# OUT ending in .tar.gz or .tar.xz makes that tarball instead of a folder (unpack it anywhere).
# Usage: bash tools/bundle.sh OUT TARGET_PATH...   (after bazel build; paths as under bazel-bin,
#        e.g. client/weftctl worker/weft-worker; WEFT_BIN_ROOT names another bazel-bin)
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 2 ]] || { echo "usage: bash tools/bundle.sh OUT TARGET_PATH..." >&2; exit 2; }
out=$1
shift
root=${WEFT_BIN_ROOT:-bazel-bin}
tarball=""
if [[ "$out" == *.tar.gz || "$out" == *.tar.xz ]]; then
  tarball=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi
mkdir -p "$out/lib" "$out/bazel-bin"

# glibc and the loader, the driver (libcuda, libnvidia-*), and the CUDA toolkit's libraries.
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libutil\.|libresolv\.|libmvec\.|libcuda\.|libnvidia-|libcudart\.|libcublas|libcublasLt\.|libnccl\.)'

for path in "$@"; do
  bin="$root/$path"
  [[ -x "$bin" ]] || { echo "bundle: $bin is not built" >&2; exit 1; }
  mkdir -p "$out/bazel-bin/$(dirname "$path")"
  cp -L "$bin" "$out/bazel-bin/$path"
  # ldd resolves through the binary's rpath (bazel's _solib folders and the system's).
  while read -r name arrow lib _; do
    [[ "$arrow" == "=>" && -f "$lib" ]] || continue
    [[ "$name" =~ $skip ]] && continue
    [[ -e "$out/lib/$name" ]] || cp -L "$lib" "$out/lib/$name"
  done < <(ldd "$bin")
done
strip --strip-unneeded "$out"/lib/*.so* 2>/dev/null || true
summary="$(find "$out/bazel-bin" -type f | wc -l) binaries, $(ls "$out/lib" | wc -l) libraries"
if [[ -n "$tarball" ]]; then
  compress=gzip
  [[ "$tarball" == *.tar.xz ]] && compress=xz
  tar -C "$out" -cf - . | "$compress" >"$tarball"
  echo "bundle: $summary, $(du -sh "$tarball" | cut -f1) in $tarball"
else
  echo "bundle: $summary, $(du -sh "$out" | cut -f1) in $out"
fi
