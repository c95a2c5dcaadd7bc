#!/usr/bin/env bash
# The explorer's live view under a steady input (issue 15): a producer appends RATE lines/s
# (in tenths, every 100 ms) from SOURCE to a new file for SECS seconds while `copus watch FILE`
# follows it in a tmux session, with COPUS_FRAME_LOG recording each frame's render time (wall
# and drawing-thread CPU, microseconds). Prints the explorer's CPU (cores, from
# /proc/PID/stat) and frame-time percentiles. Needs tmux and python3; SOURCE is any protocol
# file with enough lines (e.g. the one scripts/bench_watch.sh generates, repeated).
#
#   scripts/bench_live_view.sh SOURCE [RATE] [SECS]     (defaults: 10000 lines/s, 30 s)
set -u
SOURCE=${1:?usage: bench_live_view.sh SOURCE [RATE] [SECS]}
RATE=${2:-10000}
SECS=${3:-30}
B=$(realpath "${COPUS:-target/release/copus}")
D=$(mktemp -d /tmp/copus-live-view.XXXXXX)
SESSION=copus-live-view-$$
trap 'tmux kill-session -t $SESSION 2>/dev/null; rm -rf "$D"' EXIT
python3 - "$SOURCE" "$D/run.ndjson" "$RATE" "$SECS" 2> "$D/producer.log" <<'PY' &
import sys, time
src, dst, rate, secs = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
lines = open(src).readlines()
out = open(dst, "w")
chunk = max(1, rate // 10)
t0, i, k = time.time(), 0, 0
while time.time() - t0 < secs and i < len(lines):
    out.write("".join(lines[i:i + chunk])); out.flush(); i += chunk; k += 1
    delay = t0 + k * 0.1 - time.time()
    if delay > 0:
        time.sleep(delay)
print("producer wrote", i, "lines in", round(time.time() - t0, 1), "s", file=sys.stderr)
PY
PRODUCER=$!
sleep 0.3
tmux new-session -d -s "$SESSION" -x 200 -y 50 \
  "cd $D && COPUS_FRAME_LOG=$D/frames.log $B watch $D/run.ndjson 2> $D/err.log"
sleep 2
PID=$(pgrep -n -f "^$B watch $D/run.ndjson")
HZ=$(getconf CLK_TCK)
# Sum of utime + stime over the explorer's threads (thread names may hold spaces: fields are
# counted after the closing parenthesis of the name).
cpu() { sed 's/.*) //' /proc/"$PID"/task/*/stat | awk '{ t += $12 + $13 } END { print t }'; }
c0=$(cpu); t0=$(date +%s.%N)
sleep $((SECS - 4))
c1=$(cpu); t1=$(date +%s.%N)
wait "$PRODUCER"
tmux capture-pane -p -t "$SESSION" | sed -n 2p | cut -c1-120
echo "explorer threads (name, CPU time):"
ps -L -o comm=,time= -p "$PID" | sort | uniq -c | sed 's/^/  /'
tmux send-keys -t "$SESSION" q
sleep 1
awk -v c0="$c0" -v c1="$c1" -v t0="$t0" -v t1="$t1" -v hz="$HZ" \
  'BEGIN { printf "explorer CPU: %.2f core over %.1f s\n", (c1 - c0) / hz / (t1 - t0), t1 - t0 }'
for col in 1 2; do
  name=$([ $col = 1 ] && echo wall || echo "thread cpu")
  awk -v c=$col '{print $c}' "$D/frames.log" | sort -n | awk -v n="$name" '{a[NR]=$1} END {
    printf "frames (%s): %d, median %.2f ms, p95 %.2f ms, max %.2f ms\n", n, NR,
      a[int(NR*0.5)+1]/1000, a[int(NR*0.95)+1]/1000, a[NR]/1000 }'
done
cat "$D/producer.log"
