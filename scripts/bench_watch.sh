#!/usr/bin/env bash
# Whole-command benchmark of live ingest (issue 15): `copus watch FILE --headless
# --until-steps N --json` on N protocol lines with four layers each (~510 bytes a line),
# against baselines measured in the same run: `wc -l` (a byte-count pass) and Python's `json`
# module parsing every line. Prints wall time, CPU time (user + sys) and peak RSS per run,
# and lines/s from the wall time. Optional: REPEAT_FILE=K also runs watch on the file
# repeated K times (steps renumbered) to show that peak memory stops growing.
#
#   scripts/bench_watch.sh [LINES] [RUNS]      (defaults: 100000 lines, 3 runs)
#   COPUS=target/release/copus REPEAT_FILE=10 scripts/bench_watch.sh
set -euo pipefail
LINES=${1:-100000}
RUNS=${2:-3}
COPUS=${COPUS:-target/release/copus}
DIR=$(mktemp -d /tmp/copus-bench-watch.XXXXXX)
trap 'rm -rf "$DIR"' EXIT
FILE=$DIR/run.ndjson

python3 - "$LINES" > "$FILE" <<'PY'
import json, random, sys
n = int(sys.argv[1])
random.seed(1)
for s in range(n):
    g2, tr, bs, bb = 1.0 / (1 + s / 5000.0), 400.0, 8.0, 256.0
    sqs = g2 + tr / bs * random.uniform(0.7, 1.3)
    sqb = g2 + tr / bb * random.uniform(0.7, 1.3)
    rec = {"v": 1, "step": s, "b_small": bs, "b_big": bb, "sq_small": sqs, "sq_big": sqb,
           "tokens": (s + 1) * bb * 2048, "loss": 3.0 + 1.0 / (1 + s / 1000.0), "lr": 0.0003,
           "layers": {f"blocks.{i}.mlp": {"sq_small": sqs / 4, "sq_big": sqb / 4} for i in range(4)}}
    print(json.dumps(rec))
PY
echo "input: $LINES lines, $(stat -c %s "$FILE") bytes; machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"

measure() { # label, command...
  local label=$1; shift
  for _ in $(seq "$RUNS"); do
    /usr/bin/time -f "%e %U %S %M" -o "$DIR/t" "$@" > /dev/null 2> "$DIR/err" || { cat "$DIR/err"; exit 1; }
    read -r wall user sys rss < "$DIR/t"
    awk -v l="$label" -v w="$wall" -v u="$user" -v s="$sys" -v r="$rss" -v n="$LINES" \
      'BEGIN { printf "%-12s wall %6.2f s  cpu %6.2f s  rss %7.1f MB  %9.0f lines/s (wall)  %9.0f lines/s (cpu)\n", l, w, u+s, r/1024, n/(w>0?w:0.01), n/((u+s)>0?(u+s):0.01) }'
  done
}

measure "wc -l" wc -l "$FILE"
measure "python json" python3 -c 'import json,sys
n=0
for line in open(sys.argv[1]): json.loads(line); n+=1
print(n)' "$FILE"
measure "copus watch" "$COPUS" watch "$FILE" --headless --until-steps "$LINES" --json

if [ -n "${REPEAT_FILE:-}" ]; then
  BIG=$DIR/big.ndjson
  for k in $(seq 0 $((REPEAT_FILE - 1))); do
    awk -v off=$((k * LINES)) '{ match($0, /"step": [0-9]+/); s = substr($0, RSTART+8, RLENGTH-8) + off;
      print substr($0, 1, RSTART-1) "\"step\": " s substr($0, RSTART+RLENGTH) }' "$FILE"
  done > "$BIG"
  TOTAL=$((REPEAT_FILE * LINES))
  LINES=$TOTAL RUNS=1 measure "watch x$REPEAT_FILE" "$COPUS" watch "$BIG" --headless --until-steps "$TOTAL" --json
  rm -f "$BIG"
fi
