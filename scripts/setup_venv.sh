#!/usr/bin/env bash
# Create .venv (if missing) and install fleetcast into it: `setup_venv.sh` for the package,
# `setup_venv.sh test` for the package with its test and docs extras (the tests build the
# documentation site, and CI runs `mkdocs build --strict`).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
if [ "${1:-}" = "test" ]; then
  # The report test renders the HTML report in a real headless Chromium (Debian's packages).
  if ! command -v chromedriver >/dev/null 2>&1; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver
  fi
  .venv/bin/python -m pip install --quiet -e ".[test,docs]"
  # The documentation site's search runs from file:// through a Web Worker shim, an npm
  # package (package.json; docs/hooks.py copies it into the site).
  if ! command -v npm >/dev/null 2>&1; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq npm
  fi
  if [ ! -f node_modules/iframe-worker/shim/index.js ]; then
    npm ci --no-audit --no-fund --silent
  fi
  # The BigQuery round trip runs against a local emulator, in a venv of its own (see
  # scripts/bqemulator-requirements.txt); its DuckDB spatial extension is installed from the
  # PyPI package's file, as DuckDB cannot download one here.
  if [ ! -x .venv-bqemulator/bin/bqemulator ]; then
    "$PYTHON" -m venv .venv-bqemulator
    .venv-bqemulator/bin/python -m pip install --quiet -r scripts/bqemulator-requirements.txt
  fi
  .venv-bqemulator/bin/python - <<'PY'
import pathlib, duckdb, duckdb_extension_spatial
path = next(pathlib.Path(duckdb_extension_spatial.__file__).parent.glob(
    f"extensions/v{duckdb.__version__}/spatial.duckdb_extension"))
duckdb.execute(f"INSTALL '{path}'")
PY
else
  .venv/bin/python -m pip install --quiet -e .
fi
