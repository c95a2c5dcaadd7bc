#!/usr/bin/env bash
# The prepared GPU check: everything copus should prove on an NVIDIA GPU, in one go (within
# 5 minutes on a GPU machine with CUDA and PyTorch), writing a report to a folder.
#
#   scripts/gpu_check.sh REPORT_DIR
#
# Steps (each logged to REPORT_DIR/<step>.log; REPORT_DIR/report.md and summary.json sum up):
#   env          nvidia-smi, CPU, OS
#   build        the default build (CUDA backend compiled in) and the GPU test binary
#   backends     `copus --version`: backends compiled in, usable here, or why not
#   kernels_gpu  tests/kernels_gpu.rs with COPUS_REQUIRE_GPU=1 (a missing GPU FAILS there)
#   agree_<dt>   `copus analyze --device cpu` against `--device cuda` on generated dumps in
#                F32, BF16 and F16: every step's sq_small and sq_big within 1e-9 relative
#   bench        `copus bench --device cuda` (reduction beside the pinned host-to-device and
#                the device-to-device copy bandwidth) and `--device cpu` (beside the memory-read baseline)
#   hook_nccl    assets/python/test_torch_hook.py on the GPUs with NCCL (one GPU: gloo on
#                CUDA tensors, since NCCL needs a GPU per rank)
#   measure      scripts/measure_gpu.py: BF16/FP8 GEMMs, SDPA attention forward and backward,
#                whole training steps of Llama-style models (REPORT_DIR/measure_gpu.json)
#   compare      scripts/compare_measured.py: each step beside `copus predict` (throughput
#                error, memory), and the rows as validation CSV (REPORT_DIR/measured_rows.csv)
# NVRTC is looked for beside the loader's paths in the CUDA toolkit's lib64 and in the
# nvidia-cuda-nvrtc wheel of the python with torch.
# On a machine without a GPU the GPU steps report "no GPU" and the rest still runs, so the
# script is exercised end to end by CI. It exits non-zero when any step FAILS.
#
# Env: COPUS_GPU_CHECK_PROFILE  release (default) or dev
#      COPUS_GPU_CHECK_BUILD=0  use binaries already in target/ (a machine without cargo or
#                               crates: build here, carry target/<profile>/copus and
#                               target/<profile>/deps/kernels_gpu-*)
#      COPUS_GPU_CHECK_MB       bench size in MB (default 1024 with a GPU, 32 without)
#      COPUS_GPU_CHECK_AGREE_MB size of each step of the agreement dumps (default 256 / 8)
#      COPUS_PYTHON             a python with torch (default: the venv of python_env.sh,
#                               else python3)
#      COPUS_GPU_CHECK_TRAIN_S  time for measure's training runs (default 120; the step stops at 300 s)
#      COPUS_GPU_CHECK_TRAIN_SET which runs (default fsdp2: torchtitan's precision; default: AMP;
#                               long: 8K-48K tokens, flash and cuDNN each)
set -uo pipefail
OUT="${1:?usage: scripts/gpu_check.sh REPORT_DIR}"
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
PROFILE="${COPUS_GPU_CHECK_PROFILE:-release}"
case "$PROFILE" in
    release) TDIR=release ;;
    dev) TDIR=debug ;;
    *) echo "gpu_check: COPUS_GPU_CHECK_PROFILE must be release or dev" >&2; exit 2 ;;
esac
COPUS="$ROOT/target/$TDIR/copus"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
REPORT="$OUT/report.md"
SUMMARY="$OUT/summary.tsv"
: > "$SUMMARY"
FAILED=0
T0=$(date +%s)

# record STEP STATUS DETAIL SECONDS
record() {
    printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$SUMMARY"
    printf 'gpu_check: %-12s %-8s %s (%ss)\n' "$1" "$2" "$3" "$4"
    [[ "$2" == FAIL ]] && FAILED=1
    return 0
}

# run STEP CMD...: run with output to STEP.log; returns the command's status
run() {
    local step="$1"
    shift
    { echo "\$ $*"; "$@"; } >> "$OUT/$step.log" 2>&1
}

now() { date +%s.%N; }
# bench_rows FILE...: "what: X GB/s; ..." of copus bench --json outputs
cat > "$WORK/bench_rows.py" <<'EOF'
import json, sys
rows = [r for p in sys.argv[1:] for r in json.load(open(p))["rows"]]
print("; ".join("%s: %.2f GB/s" % (r["what"], r["gb_per_s"]) for r in rows))
EOF
bench_rows() { python3 "$WORK/bench_rows.py" "$@"; }
since() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$(now)"; }

# --- env
t=$(now)
{
    date -u
    uname -a
    echo "cores: $(nproc)"
    if command -v nvidia-smi >/dev/null 2>&1; then
        nvidia-smi -L
        nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv
    else
        echo "nvidia-smi: not found"
    fi
} > "$OUT/env.log" 2>&1
record env done "$(grep -c '^GPU ' "$OUT/env.log" || true) GPU(s) listed by nvidia-smi" "$(since "$t")"

# --- build
t=$(now)
if [[ "${COPUS_GPU_CHECK_BUILD:-1}" != 0 ]] && command -v cargo >/dev/null 2>&1; then
    if run build cargo build --profile "$PROFILE" --bin copus \
        && run build cargo test --profile "$PROFILE" --no-run --test kernels_gpu; then
        record build PASS "cargo build --profile $PROFILE (default features: CUDA compiled in)" "$(since "$t")"
    else
        record build FAIL "see build.log" "$(since "$t")"
    fi
else
    record build skipped "COPUS_GPU_CHECK_BUILD=0 or no cargo: using target/$TDIR" "$(since "$t")"
fi
if [[ ! -x "$COPUS" ]]; then
    record backends FAIL "no binary at $COPUS" 0
    echo "gpu_check: cannot go on without $COPUS" >&2
    exit 1
fi

# NVRTC where the loader does not look: the CUDA toolkit's lib64, or the nvidia-cuda-nvrtc wheel
# that PyTorch's CUDA build brings along. Only directories that hold a libnvrtc are added.
nvrtc_dirs() {
    local py="${COPUS_PYTHON:-python3}" d
    for d in "${CUDA_HOME:-/usr/local/cuda}/lib64" /usr/local/cuda/lib64 /usr/local/cuda-*/lib64; do
        [[ -d "$d" ]] && echo "$d"
    done
    "$py" -c 'import site; print("\n".join(site.getsitepackages()))' 2>/dev/null \
        | while read -r d; do [[ -d "$d/nvidia" ]] && echo "$d/nvidia"; done \
        | xargs -r -I{} find {} -maxdepth 4 -name 'libnvrtc.so*' -printf '%h\n' 2>/dev/null
}
for d in $(nvrtc_dirs | sort -u); do
    if compgen -G "$d/libnvrtc.so*" >/dev/null; then
        LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
done
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}"

# --- backends
t=$(now)
run backends "$COPUS" --version
"$COPUS" bench --devices --json > "$OUT/backends.json" 2>> "$OUT/backends.log"
read -r HAVE_GPU AUTO < <(python3 -c '
import json, sys
v = json.load(open(sys.argv[1]))
cuda = [b for b in v["backends"] if b["name"] == "cuda"][0]
print(1 if cuda["usable"] else 0, v["auto"])' "$OUT/backends.json")
NO_GPU="no GPU: $AUTO"
record backends done "--device auto uses: $AUTO" "$(since "$t")"
if [[ "$HAVE_GPU" == 1 ]]; then
    BENCH_MB="${COPUS_GPU_CHECK_MB:-1024}"
    AGREE_MB="${COPUS_GPU_CHECK_AGREE_MB:-256}"
else
    BENCH_MB="${COPUS_GPU_CHECK_MB:-32}"
    AGREE_MB="${COPUS_GPU_CHECK_AGREE_MB:-8}"
fi

# --- kernels_gpu: with a GPU it must run (COPUS_REQUIRE_GPU=1 turns a skip into a failure)
t=$(now)
KBIN="$(ls -t "$ROOT/target/$TDIR/deps/"kernels_gpu-* 2>/dev/null | grep -v '\.d$' | head -n1)"
if [[ -z "$KBIN" ]]; then
    record kernels_gpu FAIL "no kernels_gpu test binary in target/$TDIR/deps" "$(since "$t")"
elif [[ "$HAVE_GPU" == 1 ]]; then
    if COPUS_REQUIRE_GPU=1 run kernels_gpu "$KBIN" --nocapture \
        && [[ $(grep -c '^CHECKED ' "$OUT/kernels_gpu.log") -eq 3 ]]; then
        record kernels_gpu PASS "CUDA = CPU to f64 rounding on F32, F16, BF16 (sums and EMA)" "$(since "$t")"
    else
        record kernels_gpu FAIL "see kernels_gpu.log" "$(since "$t")"
    fi
else
    # CPU side: the test binary runs, and its own check that COPUS_REQUIRE_GPU=1 fails.
    if run kernels_gpu "$KBIN" --nocapture; then
        record kernels_gpu "no GPU" "$NO_GPU (CPU side passed: requiring a GPU fails)" "$(since "$t")"
    else
        record kernels_gpu FAIL "see kernels_gpu.log" "$(since "$t")"
    fi
fi

# --- agreement of CPU and CUDA on dumps in each dtype
for dt in f32 bf16 f16; do
    t=$(now)
    dump="$WORK/dump_$dt"
    if ! run "agree_$dt" "$COPUS" bench --size-mb "$AGREE_MB" --steps 3 --files 4 --dtype "$dt" \
        --keep "$dump" --device cpu --reps 1; then
        record "agree_$dt" FAIL "could not generate the dump (see agree_$dt.log)" "$(since "$t")"
        continue
    fi
    tc=$(now)
    if ! "$COPUS" analyze "$dump" --device cpu --json > "$OUT/agree_$dt.cpu.json" 2>> "$OUT/agree_$dt.log"; then
        record "agree_$dt" FAIL "analyze --device cpu failed" "$(since "$t")"
        continue
    fi
    cpu_s=$(since "$tc")
    if [[ "$HAVE_GPU" != 1 ]]; then
        record "agree_$dt" "no GPU" "$NO_GPU (CPU analyze of 3×${AGREE_MB} MB: ${cpu_s}s)" "$(since "$t")"
        rm -rf "$dump"
        continue
    fi
    tg=$(now)
    if ! "$COPUS" analyze "$dump" --device cuda --json > "$OUT/agree_$dt.cuda.json" 2>> "$OUT/agree_$dt.log"; then
        record "agree_$dt" FAIL "analyze --device cuda failed (see agree_$dt.log)" "$(since "$t")"
        continue
    fi
    gpu_s=$(since "$tg")
    if verdict=$(python3 - "$OUT/agree_$dt.cpu.json" "$OUT/agree_$dt.cuda.json" <<'EOF'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert b["backend"].startswith("cuda"), b["backend"]
worst = 0.0
assert len(a["steps"]) == len(b["steps"]), "step counts differ"
for x, y in zip(a["steps"], b["steps"]):
    for k in ("sq_small", "sq_big"):
        r = abs(x[k] - y[k]) / max(abs(x[k]), 1e-300)
        worst = max(worst, r)
print(f"{len(a['steps'])} steps, worst relative difference {worst:.2e} on {b['backend']}")
sys.exit(0 if worst < 1e-9 else 1)
EOF
    ); then
        record "agree_$dt" PASS "$verdict; analyze cpu ${cpu_s}s, cuda ${gpu_s}s" "$(since "$t")"
    else
        record "agree_$dt" FAIL "$verdict" "$(since "$t")"
    fi
    rm -rf "$dump"
done

# --- bench: CUDA beside its host-to-device copy bound; CPU beside the memory-read baseline
t=$(now)
if [[ "$HAVE_GPU" == 1 ]]; then
    if "$COPUS" bench --device cuda --size-mb "$BENCH_MB" --reps 3 --json > "$OUT/bench_cuda.json" 2>> "$OUT/bench.log" \
        && "$COPUS" bench --device cpu --size-mb "$BENCH_MB" --reps 3 --json > "$OUT/bench_cpu.json" 2>> "$OUT/bench.log"; then
        record bench PASS "$(bench_rows "$OUT/bench_cuda.json" "$OUT/bench_cpu.json")" "$(since "$t")"
    else
        record bench FAIL "see bench.log" "$(since "$t")"
    fi
else
    if "$COPUS" bench --size-mb "$BENCH_MB" --reps 1 --json > "$OUT/bench_cpu.json" 2>> "$OUT/bench.log"; then
        record bench "no GPU" "$NO_GPU (CPU: $(bench_rows "$OUT/bench_cpu.json"))" "$(since "$t")"
    else
        record bench FAIL "see bench.log" "$(since "$t")"
    fi
fi

# --- the hook with NCCL
t=$(now)
PY="${COPUS_PYTHON:-}"
if [[ -z "$PY" && -x "$HOME/.cache/copus-ci-venv/bin/python" ]]; then
    PY="$HOME/.cache/copus-ci-venv/bin/python"
fi
PY="${PY:-python3}"
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
    if [[ "$HAVE_GPU" == 1 ]]; then
        record hook_nccl FAIL "no torch in $PY (set COPUS_PYTHON)" "$(since "$t")"
    else
        record hook_nccl "no GPU" "$NO_GPU; no torch in $PY either" "$(since "$t")"
    fi
elif ! NGPU=$("$PY" -c "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)" 2>>"$OUT/hook_nccl.log") || [[ "$NGPU" == 0 ]]; then
    if [[ "$HAVE_GPU" == 1 ]]; then
        record hook_nccl FAIL "torch sees no GPU although copus does (CPU-only torch build?)" "$(since "$t")"
    else
        record hook_nccl "no GPU" "$NO_GPU (torch $("$PY" -c 'import torch; print(torch.__version__)'), no CUDA device)" "$(since "$t")"
    fi
else
    if [[ "$NGPU" -ge 2 ]]; then BACKEND=nccl; else BACKEND=gloo; fi
    if (cd assets/python && COPUS_TORCH_DEVICE=cuda COPUS_TORCH_DIST_BACKEND=$BACKEND \
            COPUS_TORCH_OUT="$OUT/hook_records" timeout 120 "$PY" -m unittest -v test_torch_hook) >> "$OUT/hook_nccl.log" 2>&1; then
        note=""
        [[ "$BACKEND" == gloo ]] && note=" (1 GPU: NCCL needs a GPU per rank, so gloo on CUDA tensors)"
        record hook_nccl PASS "$BACKEND on $NGPU GPU(s): $(grep -E '^Ran |^OK' "$OUT/hook_nccl.log" | tr '\n' ' ')$note" "$(since "$t")"
    else
        record hook_nccl FAIL "see hook_nccl.log" "$(since "$t")"
    fi
fi

# --- measure: GEMMs, attention and whole training steps with PyTorch (scripts/measure_gpu.py),
# the figures docs/MODEL.md compares copus's hardware profile with. Without a GPU: toy sizes on
# the CPU, so the script itself runs.
t=$(now)
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
    record measure "no GPU" "no torch in $PY" "$(since "$t")"
elif [[ "$HAVE_GPU" == 1 && "${NGPU:-0}" != 0 ]]; then
    if run measure timeout 300 "$PY" scripts/measure_gpu.py "$OUT" \
        --train-set "${COPUS_GPU_CHECK_TRAIN_SET:-fsdp2}" --train-budget-s "${COPUS_GPU_CHECK_TRAIN_S:-120}"; then
        record measure PASS "$OUT/measure_gpu.json: $(grep -c '^train ' "$OUT/measure.log") training runs" "$(since "$t")"
    else
        record measure FAIL "see measure.log" "$(since "$t")"
    fi
    MEASURED="$OUT/measure_gpu.json"
    HW_ARG=()
elif run measure "$PY" scripts/measure_gpu.py "$WORK/measure" --quick; then
    record measure "no GPU" "$NO_GPU (toy sizes on the CPU ran)" "$(since "$t")"
    MEASURED="$WORK/measure/measure_gpu.json"
    HW_ARG=(--hardware h100-sxm)
else
    record measure FAIL "see measure.log" "$(since "$t")"
fi

# --- compare: copus's prediction of every training step measured (scripts/compare_measured.py);
# with a GPU also the rows in the validation CSV format (REPORT_DIR/measured_rows.csv).
t=$(now)
if [[ -n "${MEASURED:-}" && -f "$MEASURED" ]]; then
    if run compare python3 scripts/compare_measured.py "$MEASURED" --copus "$COPUS" "${HW_ARG[@]}" \
        --csv "$OUT/measured_rows.csv"; then
        status=PASS
        [[ "$HAVE_GPU" == 1 ]] || status="no GPU"
        record compare "$status" "$(grep -cE ' [+-][0-9.]+%' "$OUT/compare.log") steps beside copus's prediction (compare.log)" "$(since "$t")"
    else
        record compare FAIL "see compare.log" "$(since "$t")"
    fi
else
    record compare skipped "no measurements" "$(since "$t")"
fi

# --- report
TOTAL=$(( $(date +%s) - T0 ))
{
    echo "# copus GPU check"
    echo
    echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(git rev-parse --short HEAD 2>/dev/null || echo '?'), profile $PROFILE, ${TOTAL}s in all."
    echo
    echo '```'
    cat "$OUT/backends.log"
    echo '```'
    echo
    echo "| step | status | seconds | detail |"
    echo "|---|---|---|---|"
    while IFS=$'\t' read -r step status detail secs; do
        echo "| $step | $status | $secs | ${detail//|/\\|} |"
    done < "$SUMMARY"
} > "$REPORT"
python3 - "$SUMMARY" "$OUT/summary.json" "$TOTAL" "$HAVE_GPU" <<'EOF'
import json, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
json.dump({"seconds": int(sys.argv[3]), "gpu": sys.argv[4] == "1",
           "steps": [dict(zip(("step", "status", "detail", "seconds"), r)) for r in rows]},
          open(sys.argv[2], "w"), indent=1)
EOF
echo "gpu_check: report in $REPORT (${TOTAL}s)"
if [[ "$FAILED" != 0 ]]; then
    echo "gpu_check: FAILED" >&2
    exit 1
fi
echo "gpu_check: OK"
