#!/usr/bin/env bash
# One command from a fresh checkout: create .venv, install fleetcast with its test extra, run
# the test suite (pytest). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup_venv.sh test
.venv/bin/python -m pytest "$@"
