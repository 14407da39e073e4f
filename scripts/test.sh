#!/usr/bin/env bash
# Every check CI runs, in order, stopping at the first failure. Run scripts/setup.sh once first.
#   lint and format (ruff), Python tests (pytest), front-end unit tests (node --test js/tests/),
#   the release check (scripts/check_wheel.sh: wheel and sdist, a clean-venv install; about 15 s),
#   UI tests in headless Chromium (Playwright + galata: tests/ui/, about 1 minute).
set -euo pipefail
cd "$(dirname "$0")/.."

run() {
  echo "== $*" >&2
  "$@"
}

run .venv/bin/ruff check .
run .venv/bin/ruff format --check .
run .venv/bin/python -m pytest
run npm test
run bash scripts/check_wheel.sh
run npm run test:ui
