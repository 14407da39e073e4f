#!/usr/bin/env bash
# The release check (run by scripts/test.sh; about a minute, most of it pip):
#   1. rebuild the front-end bundle (npm), then `python -m build`: the sdist from this tree and the
#      wheel FROM the sdist, as pip builds it for a user, with no npm/node on PATH, so a wheel
#      built from the sdist provably needs no Node (the sdist carries the bundle: skip-if-exists);
#   2. check both archives: the bundle (trainmeter/static/{widget,page}.{js,css}) and the agent
#      bootstrap (trainmeter/agent/boot/sitecustomize.py) present, no .venv, node_modules, run
#      folders or caches; the wheel also without tests, js sources or anything outside trainmeter/;
#   3. install the wheel WITH its dependencies (resolved from the package index, pip's cache
#      makes it quick) into a clean virtual environment, then from a folder outside the checkout:
#      `tm --version` answers `trainmeter X.Y.Z` as trainmeter/_version.py says, and
#      `tm --no-web -q -- python -c "print('wrapped')"` prints `wrapped` with the agent connected.
# Everything goes in one temporary folder, removed on any exit. PYTHON: the interpreter that
# builds and makes the venv (default .venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
t0=$SECONDS
tmp=$(mktemp -d "${TMPDIR:-/tmp}/trainmeter-wheel.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

fail() {
  echo "check_wheel: FAIL: $*" >&2
  exit 1
}
# run a step quietly and say how long it took; on failure show what it printed
quiet() {
  local what=$1 start=$SECONDS
  shift
  "$@" >"$tmp/step.log" 2>&1 || {
    cat "$tmp/step.log" >&2
    fail "$what"
  }
  echo "check_wheel: $what ($((SECONDS - start)) s)" >&2
}

version=$("$PY" -c 'import runpy; print(runpy.run_path("trainmeter/_version.py")["__version__"])')
echo "check_wheel: trainmeter $version" >&2

# 1. build
quiet "npm run build" npm run --silent build
mkdir "$tmp/no-node" # an empty PATH: the jupyter-builder hook finds no npm
quiet "python -m build" env PATH="$tmp/no-node" "$PY" -m build --outdir "$tmp/dist" .
grep -q "Building wheel from sdist" "$tmp/step.log" || fail "the wheel was not built from the sdist"
sdist=$tmp/dist/trainmeter-$version.tar.gz
wheel=$tmp/dist/trainmeter-$version-py3-none-any.whl
[ -f "$sdist" ] && [ -f "$wheel" ] || fail "expected $(basename "$sdist") and $(basename "$wheel")"

# 2. contents
"$PY" - "$wheel" "$sdist" "$version" <<'EOF' || fail "archive contents"
import sys, tarfile, zipfile

wheel, sdist, version = sys.argv[1:]
NEEDED = ["trainmeter/static/widget.js", "trainmeter/static/widget.css",
          "trainmeter/static/page.js", "trainmeter/static/page.css",
          "trainmeter/agent/boot/sitecustomize.py", "trainmeter/cli.py", "trainmeter/_version.py"]
JUNK = (".venv/", "node_modules/", ".trainmeter/", "__pycache__/", ".pytest_cache/",
        "test-results/", "playwright-report/", "dist/")
# The sdist keeps tests/, js/ and docs/ on purpose: it is the source (a packager rebuilds the
# bundle and runs the tests from it); the wheel is what gets installed, so it holds trainmeter/.

def check(label, sizes, extra_ok):
    bad = []
    for need in NEEDED:
        if sizes.get(need, 0) <= (0 if need.endswith(".py") else 1000):
            bad.append(f"{need} missing or empty")
    for name in sizes:
        if any(j in "/" + name for j in ["/" + j for j in JUNK]) or name.endswith(".pyc"):
            bad.append(f"{name} should not be there")
        elif not extra_ok(name):
            bad.append(f"{name} should not be there")
    for b in bad:
        print(f"check_wheel: {label}: {b}", file=sys.stderr)
    print(f"check_wheel: {label}: {len(sizes)} files, bundle and bootstrap present", file=sys.stderr)
    return not bad

with zipfile.ZipFile(wheel) as z:
    wsizes = {i.filename: i.file_size for i in z.infolist()}
    entry = z.read(f"trainmeter-{version}.dist-info/entry_points.txt").decode()
dist_info = f"trainmeter-{version}.dist-info/"
ok = check("wheel", wsizes, lambda n: n.startswith(("trainmeter/", dist_info)))
if "tm = trainmeter.cli:main" not in entry:
    print("check_wheel: wheel: no `tm` console script", file=sys.stderr)
    ok = False
if wsizes.get("trainmeter/notebooks/replay.ipynb", 0) < 500:  # tm view's template (force-include)
    print("check_wheel: wheel: trainmeter/notebooks/replay.ipynb missing", file=sys.stderr)
    ok = False
prefix = f"trainmeter-{version}/"
with tarfile.open(sdist) as t:
    ssizes = {m.name[len(prefix):]: m.size for m in t.getmembers()
              if m.isfile() and m.name.startswith(prefix)}
ok &= check("sdist", ssizes, lambda n: True)
for need in ("pyproject.toml", "package.json", "package-lock.json", "js/widget.js", "PKG-INFO",
             "notebooks/replay.ipynb"):
    if need not in ssizes:
        print(f"check_wheel: sdist: {need} missing", file=sys.stderr)
        ok = False
sys.exit(0 if ok else 1)
EOF

# 3. a clean virtual environment, outside the checkout
venv=$tmp/venv
quiet "python -m venv" "$PY" -m venv "$venv"
quiet "pip install the wheel" env -u PYTHONPATH "$venv/bin/python" -m pip install \
  --disable-pip-version-check --no-compile "$wheel"
mkdir "$tmp/work"
cd "$tmp/work"
export PATH="$venv/bin:$PATH"
unset PYTHONPATH TRAINMETER_SOCKET TRAINMETER_GPU_BACKEND
where=$(python -c 'import trainmeter; print(trainmeter.__file__)')
case $where in "$venv"/*) ;; *) fail "trainmeter imported from $where, not the clean venv" ;; esac
answer=$(tm --version)
[ "$answer" = "trainmeter $version" ] || fail "tm --version said '$answer', not 'trainmeter $version'"
out=$(tm --no-web -q -- python -c "print('wrapped')")
[ "$out" = "wrapped" ] || fail "tm --no-web -q -- python -c \"print('wrapped')\" printed '$out'"
grep -q '"k":"agent_hello"' .trainmeter/runs/*/run.jsonl ||
  fail "the agent did not connect from the installed wheel (boot/sitecustomize.py)"
echo "check_wheel: ok: $(basename "$wheel") and $(basename "$sdist") build, install and run ($((SECONDS - t0)) s)" >&2
