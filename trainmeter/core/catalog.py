"""The name catalog: which reported series is the train loss, which the validation loss.

Training code names its loss in many ways (``loss``, ``train/loss``, ``train_loss``,
``eval_loss``, ``val/loss``, ``loss/val`` from TensorBoard's ``add_scalars`` ...). The agent
keeps each series under the name the code gave it and adds a *role* from :func:`role`, so the
dashboard can find "the" train and validation loss without renaming anything.

The grammar (case-insensitive; ``/ . _ -``, spaces and ``:`` all separate words):

    name     := phase? loss | loss phase
    loss     := qualifier* "loss" "step"?
    phase    := train words -> train loss | validation words -> validation loss
    no phase -> train loss (``loss``, ``lm_loss``: what a training loop prints)

Train words: ``train``, ``training``. Validation words: ``val``, ``valid``, ``validation``,
``eval``, ``evaluation``, ``dev``, ``test``. Qualifiers: ``lm``, ``ce``, ``total``, ``mean``,
``avg``, ``average``. A trailing ``step`` is Lightning's per-step copy (``train_loss_step``);
its ``_epoch`` copy is an average over an epoch and gets no role, nor does anything else
(``loss_scale``, ``train/grad_norm``, ``val/accuracy``, ``train/loss/ema``).
"""

from __future__ import annotations

import re

TRAIN_LOSS = "train_loss"
VAL_LOSS = "val_loss"
ROLES = (TRAIN_LOSS, VAL_LOSS)

TRAIN_WORDS = frozenset({"train", "training"})
VAL_WORDS = frozenset({"val", "valid", "validation", "eval", "evaluation", "dev", "test"})
QUALIFIERS = frozenset({"lm", "ce", "total", "mean", "avg", "average"})
MAX_NAME = 200  # longer names get no role (and cost no regex time)

_SPLIT = re.compile(r"[/._\-\s:]+")


def words(name: str) -> list[str]:
    """The lower-case words of a name: ``"Train/LM_loss"`` -> ``["train", "lm", "loss"]``."""
    return [w for w in _SPLIT.split(name.lower()) if w]


def role(name: str) -> str | None:
    """The role of a series name: ``"train_loss"``, ``"val_loss"``, or None.

    Args:
        name: the series name as the training code spelled it (kept unchanged elsewhere).
    Returns:
        ``"train_loss"`` for ``loss``, ``train/loss``, ``train_loss``, ``training_loss``,
        ``train/lm_loss``, ``loss/train`` ...; ``"val_loss"`` for ``eval_loss``, ``eval/loss``,
        ``val/loss``, ``val_loss``, ``validation_loss``, ``valid/loss``, ``test/loss``,
        ``loss/val`` ...; None for anything else (see the module's grammar).
    """
    if not isinstance(name, str) or len(name) > MAX_NAME:
        return None
    w = words(name)
    if not w:
        return None
    phase = None
    if w[0] in TRAIN_WORDS or w[0] in VAL_WORDS:  # phase first: train/loss, eval_loss
        phase, rest = w[0], w[1:]
    elif w[-1] in TRAIN_WORDS or w[-1] in VAL_WORDS:  # phase last: loss/train (add_scalars)
        phase, rest = w[-1], w[:-1]
    else:
        rest = w
    if not _is_loss(rest):
        return None
    return VAL_LOSS if phase in VAL_WORDS else TRAIN_LOSS


def _is_loss(w: list[str]) -> bool:
    if w and w[-1] == "step":
        w = w[:-1]
    return bool(w) and w[-1] == "loss" and all(q in QUALIFIERS for q in w[:-1])
