#!/usr/bin/env bash
# Create .venv (if missing) and install fleetcast into it: `setup_venv.sh` for the package,
# `setup_venv.sh test` for the package with its test extra.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
if [ "${1:-}" = "test" ]; then
  .venv/bin/python -m pip install --quiet -e ".[test]"
else
  .venv/bin/python -m pip install --quiet -e .
fi
