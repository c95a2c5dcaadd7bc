#!/usr/bin/env bash
# CI check: compile every CUDA kernel (kernels/*.cu) with a real NVRTC, no GPU needed.
#
# Installs NVRTC for CUDA 13.0 (matching cudarc's `cuda-13000` feature and the driver-580 /
# CUDA 13.0 machines) from PyPI into a throw-away virtualenv, points the loader at the wheel's
# lib dir, runs `cargo test --test kernels_compile`, and FAILS unless the
# test really compiled the kernels (a "SKIPPED" run, e.g. NVRTC not found, is a failure).
#
# Usage: scripts/ci_nvrtc.sh            (NVRTC_WHEEL=nvidia-cuda-nvrtc==13.0.* to override)
set -euo pipefail

cd "$(dirname "$0")/.."
WHEEL="${NVRTC_WHEEL:-nvidia-cuda-nvrtc==13.0.*}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

python3 -m venv "$WORK/venv"
"$WORK/venv/bin/pip" install --quiet "$WHEEL"

# The wheel ships lib/libnvrtc.so.13 (+ libnvrtc-builtins.so.13.x) under nvidia/cu13/.
LIBDIR="$(dirname "$(find "$WORK/venv" -name 'libnvrtc.so.*' ! -name '*builtins*' ! -name '*.alt.*' | head -n1)")"
if [[ ! -e "$LIBDIR/libnvrtc.so.13" ]]; then
    echo "ci_nvrtc: no libnvrtc.so.13 in the $WHEEL wheel" >&2
    exit 1
fi
# cudarc 0.19 (cuda-13000) tries libnvrtc.so, then ... libnvrtc.so.13; link the plain name too.
ln -sf "$LIBDIR/libnvrtc.so.13" "$WORK/libnvrtc.so"
export LD_LIBRARY_PATH="$WORK:$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

LOG="$WORK/test.log"
cargo test --test kernels_compile -- --nocapture 2>&1 | tee "$LOG"
if grep -q "SKIPPED" "$LOG"; then
    echo "ci_nvrtc: FAILED: the kernel test skipped (NVRTC not loaded)" >&2
    exit 1
fi
if ! grep -q "^COMPILED kernels/" "$LOG"; then
    echo "ci_nvrtc: FAILED: no kernel was compiled" >&2
    exit 1
fi
echo "ci_nvrtc: OK: $(grep -c '^COMPILED kernels/' "$LOG") kernel file(s) compiled with NVRTC from $WHEEL"
