#!/usr/bin/env bash
# The README's picture, docs/img/widget.png, from the quickstart notebook run in JupyterLab as a
# user runs it (tests/ui/readme.picture.ts): a real run on this machine, no test data in it.
#   bash scripts/readme_picture.sh          (after scripts/setup.sh; a few minutes on a CPU)
set -euo pipefail
cd "$(dirname "$0")/.."
npm run --silent build
TM_UI_README=1 npx playwright test -c tests/ui/playwright.config.ts
echo "wrote docs/img/widget.png"
