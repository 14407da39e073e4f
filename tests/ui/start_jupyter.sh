#!/usr/bin/env bash
# Playwright's webServer for the UI tests (see playwright.config.ts): JupyterLab from .venv on
# $TM_UI_JUPYTER_PORT, its root a temporary folder holding copies of tests/ui/notebooks/. The
# folder (and the run logs the notebooks write into it) is removed when Playwright stops the server.
# JupyterLab's own log goes to tests/ui/jupyter.log, and to stderr if it exits by itself.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
: "${TM_UI_JUPYTER_PORT:?set by tests/ui/playwright.config.ts}"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/trainmeter-ui-XXXXXX")
root=$tmp/root
mkdir "$root" "$tmp/scratch"
pid=
cleanup() {
  if [ -n "$pid" ]; then
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 143' TERM INT
cp "$repo"/tests/ui/notebooks/*.ipynb "$root"/
if [ -n "${TM_UI_README:-}" ]; then  # scripts/readme_picture.sh: the quickstart as a user runs it
  cp "$repo"/notebooks/quickstart.ipynb "$root"/
  cp -r "$repo"/examples "$tmp"/examples  # the quickstart imports ../examples/train_gpt.py
fi
export TM_UI_ROOT_DIR=$root TM_UI_SCRATCH=$tmp/scratch TM_UI_REPO=$repo
log=$repo/tests/ui/jupyter.log
"$repo/.venv/bin/jupyter" lab --config "$repo/tests/ui/jupyter_server_config.py" >"$log" 2>&1 &
pid=$!
status=0
wait "$pid" || status=$?
pid=
echo "start_jupyter.sh: JupyterLab exited ($status); the end of $log:" >&2
tail -n 40 "$log" >&2
exit "$status"
