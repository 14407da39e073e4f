#!/usr/bin/env bash
# Set up .venv for trainmeter: torch (CPU build where that wheel is local), trainmeter itself
# as an editable install (its build runs `npm install && npm run build` for the widget),
# JupyterLab and the test tools; and, for the UI tests (tests/ui/), the npm dev packages
# (Playwright, galata) and Debian's chromium if /usr/bin/chromium is missing. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
# The UI tests drive Debian's chromium (below): Playwright never downloads a browser of its own.
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1

if ! command -v npm >/dev/null 2>&1; then
  echo "setup: npm (Node.js 18 or newer) is needed to build the widget; e.g. apt-get install -y nodejs npm" >&2
  exit 1
fi
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# torch is never a dependency of trainmeter; the example and the tests need it.
.venv/bin/python -m pip install -q "torch==2.13.0" numpy
if [ -z "${TM_UI_CHROMIUM:-}" ] && [ ! -x /usr/bin/chromium ]; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup: the UI tests need Chromium at /usr/bin/chromium (or set TM_UI_CHROMIUM to one)" >&2
    exit 1
  fi
  SUDO=
  [ "$(id -u)" = 0 ] || SUDO=sudo
  echo "setup: installing chromium with apt-get (for the UI tests)" >&2
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
npm ci --no-audit --no-fund --loglevel=error && npm run --silent build
.venv/bin/python -m pip install -q -e ".[test,lab]"
.venv/bin/tm --version
