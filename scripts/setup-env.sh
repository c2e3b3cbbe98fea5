#!/usr/bin/env bash
# Create ./.venv and install seps-bench with all its extras (bench, ray) and the test and lint ones.
#
# SEPS_TORCH selects the PyTorch build installed first. The default pins the
# release this project is tested with (on the CI machine pip takes it from the
# local disk). Users with CUDA can set SEPS_TORCH="" to let pip resolve the
# range declared in pyproject.toml, or e.g. SEPS_TORCH="torch==2.6.0" together
# with --index-url for their CUDA wheel.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${SEPS_VENV:-.venv}"
PYTHON="${PYTHON:-python3}"
TORCH_SPEC="${SEPS_TORCH-torch==2.14.1 torchvision==0.29.1}"
# The CUDA build of torch alone is about 5.5 GB in the venv; pip's wheel cache would
# hold a second copy of every download, and a CI run once ran out of disk while
# installing (ENOSPC). SEPS_PIP_CACHE=1 keeps the cache (pip reads any value of
# PIP_NO_CACHE_DIR, "0" included, as "no cache").
if [ -z "${SEPS_PIP_CACHE:-}" ]; then export PIP_NO_CACHE_DIR=1; fi

"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
if [ -n "$TORCH_SPEC" ]; then
    # shellcheck disable=SC2086
    "$VENV/bin/python" -m pip install --quiet $TORCH_SPEC
fi
"$VENV/bin/python" -m pip install --quiet -e ".[all,test,lint]"
"$VENV/bin/python" -c "import torch, seps; print('seps-bench', seps.__version__, '| torch', torch.__version__, '| cuda', torch.cuda.is_available())"
