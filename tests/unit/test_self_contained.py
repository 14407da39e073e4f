"""The repository explains itself (docs/architecture.md): no file under trainmeter/, docs/,
tests/, js/, scripts/, benchmarks/, examples/ or the README points at a file outside it, at this
project's issue numbers, or at an invariant by a bare number (they are cited by name)."""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLACES = ("trainmeter", "docs", "tests", "js", "scripts", "benchmarks", "examples", "README.md")
# the brief's folder beside the repository and its files, spelt in parts so that this file
# names none of them itself
UP, BRIEF = "../" + "shared", ("SPEC" + ".md", "REFERENCE" + ".md")
FORBIDDEN = {
    "a file outside the repository": re.compile(
        "|".join([re.escape(UP), *(r"\b" + re.escape(f) for f in BRIEF)])
    ),
    "an issue number of this project": re.compile(r"(?<!ROCm )\b[Ii]ssues? \d+"),
    "an invariant by number": re.compile(r"\b[Ii]nvariants? \d+"),
}
SELF = Path(__file__).name


def _files() -> list[str]:
    out = subprocess.run(["git", "ls-files", *PLACES], cwd=ROOT, capture_output=True, text=True)
    suffixes = (".py", ".md", ".js", ".ts", ".css", ".toml", ".sh", ".ipynb")
    return [f for f in out.stdout.split() if f.endswith(suffixes) and not f.endswith(SELF)]


def test_there_are_files_to_read():
    assert len(_files()) > 100  # git works here and the places exist


@pytest.mark.parametrize("what", FORBIDDEN)
def test_no_file_refers_outside_itself(what):
    pattern = FORBIDDEN[what]
    hits = []
    for name in _files():
        for i, line in enumerate((ROOT / name).read_text(errors="replace").splitlines(), 1):
            if pattern.search(line):
                hits.append(f"{name}:{i}: {line.strip()[:100]}")
    assert hits == [], f"{what}:\n" + "\n".join(hits[:20])


def test_the_patterns_catch_what_they_name():
    caught = [
        f"{UP}/{BRIEF[0]}",
        BRIEF[1],
        "(issue 15)",
        "issues 5 and 16",
        "invariant 8",
        "Invariants 1",
    ]
    kept = ["ROCm/ROCm issue 4203", "the never-raise invariant", "tissue 3"]
    assert all(any(p.search(t) for p in FORBIDDEN.values()) for t in caught)
    assert not any(p.search(t) for p in FORBIDDEN.values() for t in kept)
