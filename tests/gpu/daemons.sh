# The prologue of the scripts that run the daemons on one device (faults.sh, metrics.sh), sourced
# by them, not run: it reads their arguments (BIN_DIR cuda|cpu LOGDIR) and makes a scratch folder
# whose logs are copied into LOGDIR, and every daemon whose pid the script adds to `pids` stopped,
# when the script exits. Sets b (BIN_DIR, absolute), device, device_flag (cuda:0 for cuda), logs,
# dir and pids; the working folder is the repository's root.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
[[ $# -eq 3 ]] || {
  echo "usage: bash tests/gpu/$(basename "$0") BIN_DIR cuda|cpu LOGDIR" >&2
  exit 2
}
b=$(cd "$1" && pwd) device=$2 logs=$3
device_flag=$device
[[ "$device" == cuda ]] && device_flag=cuda:0
mkdir -p "$logs"
dir=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; cp "$dir"/*.log "$dir"/*.txt "$logs/" 2>/dev/null; rm -rf "$dir"' EXIT
