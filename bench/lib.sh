# Shared by the bench/*.sh scripts: `source bench/lib.sh`.

# stdin: `weftctl local --json` lines; prints "median min" of step_seconds over the steps after
# the first 5 (warm-up), or "- -" when there are none.
median_step() {
  python3 -c '
import json, statistics, sys
t = [json.loads(l)["step_seconds"] for l in sys.stdin if l.startswith("{\"type\":\"step\"")]
t = t[5:]
print("%.4f %.4f" % (statistics.median(t), min(t)) if t else "- -")'
}
