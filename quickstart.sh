#!/usr/bin/env bash
# One command from a fresh checkout: create .venv, install fleetcast, generate the embedded
# synthetic trace and run configs/demo.textproto end to end, then print where the results are.
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup_venv.sh
.venv/bin/fleetcast run configs/demo.textproto --output_dir "${FLEETCAST_OUTPUT:-results/demo}" "$@"
