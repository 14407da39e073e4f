"""The name catalog: common spellings of the train and validation loss get their role; the
name itself is never changed, and anything that is not a loss gets no role."""

import pytest

from trainmeter.core.catalog import TRAIN_LOSS, VAL_LOSS, role, words

TRAIN = [
    "loss", "Loss", "train/loss", "train_loss", "training_loss", "train/lm_loss", "train-loss",
    "train.loss", "Train Loss", "Loss/train", "loss/train", "lm_loss", "lm loss", "train/ce_loss",
    "train/total_loss", "train_loss_step", "training/avg_loss", "train:loss",
]  # fmt: skip
VAL = [
    "eval_loss", "eval/loss", "val/loss", "val_loss", "validation_loss", "valid/loss",
    "test/loss", "test_loss", "Loss/val", "loss/validation", "dev_loss", "evaluation/loss",
    "eval/lm_loss", "val_loss_step", "VAL/LOSS",
]  # fmt: skip
NONE = [
    "", "lr", "learning_rate", "loss_scale", "train/loss_scale", "train/grad_norm", "val/accuracy",
    "eval_runtime", "train_loss_epoch", "train/val_loss", "losses", "train/loss/ema", "epoch",
    "loss_train_val", "val", "train", "loss/train/extra", "my_loss", "gpu0/sm_active",
]  # fmt: skip


@pytest.mark.parametrize("name", TRAIN)
def test_train_loss_spellings(name):
    assert role(name) == TRAIN_LOSS == "train_loss"


@pytest.mark.parametrize("name", VAL)
def test_validation_loss_spellings(name):
    assert role(name) == VAL_LOSS == "val_loss"


@pytest.mark.parametrize("name", NONE)
def test_other_names_have_no_role(name):
    assert role(name) is None


def test_words_split_on_every_separator_and_lower_the_case():
    assert words("Train/LM_loss") == ["train", "lm", "loss"]
    assert words("a.b-c d:e//f") == ["a", "b", "c", "d", "e", "f"]


def test_non_strings_and_very_long_names_have_no_role():
    assert role(None) is None
    assert role(3) is None
    assert role("train/" + "x" * 300 + "/loss") is None
    assert role("train_" + "lm_" * 63 + "loss") == TRAIN_LOSS  # 199 characters
    assert role("train_" + "lm_" * 64 + "loss") is None  # 202: past MAX_NAME
