#!/usr/bin/env bash
# tools/bundle.sh makes a relocatable tarball: the daemons and weftctl bundled with their shared
# libraries, unpacked into a fresh folder, load every library beyond glibc from the bundle's
# lib/ (ldd with LD_LIBRARY_PATH naming only it), and run from there with a PATH without
# bazel's, train the quickstart model on one rank to SUCCEEDED with every step reported.
set -euo pipefail
runfiles=${TEST_SRCDIR:-$PWD/..}/weft
tmp=${TEST_TMPDIR:-$(mktemp -d)}
cd "$runfiles"
WEFT_BIN_ROOT="$runfiles" bash tools/bundle.sh "$tmp/weft.tar.gz" \
  client/weftctl coordinator/weft-coordinator worker/weft-worker
mkdir -p "$tmp/unpacked"
tar -C "$tmp/unpacked" -xzf "$tmp/weft.tar.gz"
# With only the bundle's lib/ on the path, every library a binary loads beyond glibc, the
# loader and the GPU driver and toolkit resolves into the bundle.
glibc='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libutil\.|libresolv\.|libmvec\.)'
for bin in "$tmp"/unpacked/bazel-bin/*/*; do
  outside=$(LD_LIBRARY_PATH="$tmp/unpacked/lib" ldd "$bin" |
            awk '$2 == "=>" { print $1, $3 }' | grep -Ev "$glibc" | grep -v " $tmp/unpacked/lib/" || true)
  [[ -z "$outside" ]] || { echo "FAIL: $bin loads from outside the bundle:"; echo "$outside"; exit 1; }
  [[ $(LD_LIBRARY_PATH="$tmp/unpacked/lib" ldd "$bin" | grep -c "not found") -eq 0 ]] ||
    { echo "FAIL: $bin misses a library"; exit 1; }
done
ls "$tmp/unpacked/lib" | grep -q '^libgrpc++' || { echo "FAIL: no libgrpc++ in the bundle"; exit 1; }
sed -e 's/^mesh: .*/mesh: {shape: [1], dim_names: [dp]}/' -e 's/^train: .*/train: {steps: 3, seed: 1}/' \
  examples/quickstart.yaml >"$tmp/job.yaml"
out=$(env -i PATH=/usr/bin:/bin HOME="$tmp" OMP_WAIT_POLICY=passive \
        LD_LIBRARY_PATH="$tmp/unpacked/lib" \
        "$tmp/unpacked/bazel-bin/client/weftctl" local --json "$tmp/job.yaml")
echo "$out"
steps=$(grep -c '"type":"step"' <<<"$out" || true)
grep -q '"state":"SUCCEEDED"' <<<"$out" || { echo "FAIL: the job did not succeed"; exit 1; }
[[ "$steps" -eq 3 ]] || { echo "FAIL: $steps steps reported, not 3"; exit 1; }
echo "PASS: the unpacked bundle ran the job"
