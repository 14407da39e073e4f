"""``reasons.WORDING`` follows the words: a fingerprint of every string ``core/reasons.py``
writes is pinned here beside the revision it was taken at, so changing what a reason says
without bumping ``WORDING`` fails this test (and a stored passport in the old words would
otherwise be shown as current by ``tm passport``: ``supervisor/passport_files.py``)."""

import ast
import hashlib
from pathlib import Path

from trainmeter.core import reasons

SOURCE = Path(reasons.__file__)
PINNED = (6, "e2885de1d28e2981")
"""(``reasons.WORDING``, :func:`fingerprint` of ``core/reasons.py``) when the words were last
revised."""


def fingerprint(source: str) -> str:
    """The first 16 hex digits of the SHA-256 of the module's string constants (the pieces of
    its f-strings included; docstrings, comments and code left out), sorted, so that moving
    code changes nothing and changing a word changes it."""
    tree = ast.parse(source)
    docs = {id(n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}  # fmt: skip
    words = sorted(n.value for n in ast.walk(tree)
                   if isinstance(n, ast.Constant) and isinstance(n.value, str)
                   and id(n) not in docs)  # fmt: skip
    return hashlib.sha256("\0".join(words).encode()).hexdigest()[:16]


def test_the_wording_revision_is_bumped_with_the_words():
    now = (reasons.WORDING, fingerprint(SOURCE.read_text()))
    assert now == PINNED, (
        f"core/reasons.py's words are {now[1]}, pinned as {PINNED[1]} at WORDING {PINNED[0]}: "
        f"if what a reason says changed, set reasons.WORDING = {PINNED[0] + 1} and PINNED = "
        f"({PINNED[0] + 1}, {now[1]!r}) here (tm passport then rebuilds passports in the old "
        "words), and run `python tests/unit/test_surfaces.py --write` and `npm test`"
    )


def test_the_fingerprint_sees_a_changed_word_and_not_a_moved_function_or_a_docstring():
    src = SOURCE.read_text()
    base = fingerprint(src)
    assert fingerprint(src.replace("no device was seen", "no device seen")) != base
    assert (
        fingerprint(src.replace('"""Why a figure is missing', '"""Why any figure is missing'))
        == base
    )
    # _text moved to the module's end
    head, _, tail = src.partition("\ndef _text(")
    body, _, rest = tail.partition("\n\n\n")
    moved = f"{head}\n{rest}\n\n\ndef _text({body}\n"
    assert moved != src and fingerprint(moved) == base
