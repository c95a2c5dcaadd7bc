#!/usr/bin/env bash
# Whole-process ingest and analysis benchmark (issue 15): `copus analyze FILE --json` on a
# generated protocol file, against baselines measured in the same run on the same file: a
# byte-count pass (`wc -l`) and Python's `json` module reading it line by line.
#
# Usage: scripts/bench_ingest.sh [LINES] [REPS]   (defaults 100000 and 5)
# Environment: BIN (default target/release/copus; build it first with `cargo build --release`),
# LAYERS (default 4), DIR (default /tmp/copus-bench-ingest; generated files go there).
# Prints the best and the worst wall time of REPS runs of each command, lines/s of the best,
# and the peak RSS of one run of each copus command.
set -euo pipefail
cd "$(dirname "$0")/.."
LINES=${1:-100000}
REPS=${2:-5}
BIN=${BIN:-target/release/copus}
LAYERS=${LAYERS:-4}
DIR=${DIR:-/tmp/copus-bench-ingest}
mkdir -p "$DIR"
distinct="$DIR/distinct-$LINES-$LAYERS.ndjson"
repeated="$DIR/repeated-$LINES-$LAYERS.ndjson"
[ -s "$distinct" ] || python3 scripts/gen_stats.py "$distinct" "$LINES" --layers "$LAYERS"
[ -s "$repeated" ] || python3 scripts/gen_stats.py "$repeated" "$LINES" --layers "$LAYERS" --repeat-step
echo "input: $LINES lines, $LAYERS layers, $(($(stat -c %s "$distinct") / LINES)) bytes a line; best of $REPS"

# bench NAME COMMAND...: best and worst wall time of REPS runs (stdout discarded), and the
# best CPU time (user + system, all threads): on a shared machine the wall time includes
# waiting for a core, the CPU time does not.
bench() {
    local name=$1
    shift
    local best="" worst="" cpu="" out wall c
    for _ in $(seq "$REPS"); do
        out=$( { /usr/bin/time -f '%e %U %S' "$@" >/dev/null; } 2>&1 | tail -n 1)
        wall=$(echo "$out" | awk '{printf "%d", $1 * 1000}')
        c=$(echo "$out" | awk '{printf "%d", ($2 + $3) * 1000}')
        if [ -z "$best" ] || [ "$wall" -lt "$best" ]; then best=$wall; fi
        if [ -z "$worst" ] || [ "$wall" -gt "$worst" ]; then worst=$wall; fi
        if [ -z "$cpu" ] || [ "$c" -lt "$cpu" ]; then cpu=$c; fi
    done
    local rate=$((LINES * 1000 / (best > 0 ? best : 1)))
    local crate=$((LINES * 1000 / (cpu > 0 ? cpu : 1)))
    printf '%-42s wall best %6d ms worst %6d ms = %8d lines/s | cpu %6d ms = %8d lines/cpu-s\n' \
        "$name" "$best" "$worst" "$rate" "$cpu" "$crate"
}

# peak NAME COMMAND...: peak resident memory of one run.
peak() {
    local name=$1
    shift
    local kb
    kb=$( { /usr/bin/time -f '%M' "$@" >/dev/null; } 2>&1 | tail -n 1)
    printf '%-44s peak RSS %6d MiB\n' "$name" "$((kb / 1024))"
}

py_json='import json, sys
n = 0
for line in open(sys.argv[1], "rb"):
    json.loads(line)
    n += 1'

bench "wc -l (byte-count baseline)" wc -l "$distinct"
bench "python3 json.loads per line (baseline)" python3 -c "$py_json" "$distinct"
bench "copus analyze --json (distinct steps)" "$BIN" analyze "$distinct" --json
bench "copus analyze --json (one repeated step)" "$BIN" analyze "$repeated" --json
bench "copus analyze (table)" "$BIN" analyze "$distinct"
peak "copus analyze --json (distinct steps)" "$BIN" analyze "$distinct" --json
peak "copus analyze --json (one repeated step)" "$BIN" analyze "$repeated" --json

# Optional: the distinct-step command with an earlier build (e.g. BEFORE=/tmp/copus-before).
# (Not the repeated-step file: before issue 15 that case was quadratic, minutes at 100k lines.)
if [ -n "${BEFORE:-}" ]; then
    bench "before: copus analyze --json (distinct)" "$BEFORE" analyze "$distinct" --json
    peak "before: copus analyze --json (distinct)" "$BEFORE" analyze "$distinct" --json
fi
