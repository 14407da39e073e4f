#!/usr/bin/env bash
# Set up .venv for trainmeter: torch (CPU build where that wheel is local), trainmeter itself
# as an editable install (its build runs `npm install && npm run build` for the widget),
# JupyterLab and the test tools. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

if ! command -v npm >/dev/null 2>&1; then
  echo "setup: npm (Node.js 18 or newer) is needed to build the widget; e.g. apt-get install -y nodejs npm" >&2
  exit 1
fi
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# torch is never a dependency of trainmeter; the example and the tests need it.
.venv/bin/python -m pip install -q "torch==2.13.0" numpy
npm ci --no-audit --no-fund --loglevel=error && npm run --silent build
.venv/bin/python -m pip install -q -e ".[test,lab]"
.venv/bin/tm --version
