#!/usr/bin/env bash
# Create (or reuse) the Python environment that the torch tests run in: a virtualenv with
# PyTorch (CPU use only; the PyPI wheel brings its CUDA libraries too, ~5 GB), PyTorch
# Lightning and the Hugging Face Trainer (transformers + accelerate) for the callbacks' tests,
# and copus_hook installed from assets/python. Cached across runs on the same machine.
#
# Usage: scripts/python_env.sh            prints the venv's python on its last line
# Env:   COPUS_VENV   where the venv lives (default: $HOME/.cache/copus-ci-venv)
#        COPUS_TORCH  the torch requirement (default: torch)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${COPUS_VENV:-$HOME/.cache/copus-ci-venv}"
TORCH="${COPUS_TORCH:-torch}"
STAMP="$VENV/.copus-stamp"
EXTRA="numpy lightning transformers accelerate"
WANT="torch=$TORCH $EXTRA v2"

if [[ ! -x "$VENV/bin/python" ]]; then
    echo "python_env: creating $VENV" >&2
    python3 -m venv "$VENV"
fi
if [[ "$(cat "$STAMP" 2>/dev/null || true)" != "$WANT" ]] \
    || ! "$VENV/bin/python" -c "import torch, lightning, transformers, accelerate" 2>/dev/null; then
    echo "python_env: installing $TORCH $EXTRA into $VENV (a minute or two, ~5 GB)" >&2
    # shellcheck disable=SC2086
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$TORCH" $EXTRA >&2
    echo "$WANT" > "$STAMP"
fi
# copus_hook itself, from the working tree (fast; keeps the package install tested).
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --force-reinstall ./assets/python >&2 || {
    echo "python_env: pip install ./assets/python failed" >&2
    exit 1
}
"$VENV/bin/python" -c "import torch, sys; print(f'python_env: torch {torch.__version__} on python {sys.version.split()[0]}', file=sys.stderr)"
echo "$VENV/bin/python"
