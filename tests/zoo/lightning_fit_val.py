"""Lightning ``Trainer.fit`` with validation, the sanity check on and a TensorBoard logger, as
Lightning's own quick-start does; crashed the first optimizer step under tm ("OrderedDict
mutated during iteration", from the sanity check's ``model.eval()``), and lost the evaluation
time (Lightning 2.6 restores training mode by setting ``.training`` on every submodule, never
calling ``train()``: ``_ModuleMode.restore`` in lightning/pytorch/utilities/model_helpers.py).

A tiny language model (embedding, Linear, GELU, Linear to the vocabulary) on random token ids:
12 steps of batch 4 x 16 tokens (one epoch), SGD, validation every 4 steps on 2 batches, and
the default 2-batch sanity check before training. ``self.log("train_loss", ...)`` every step
(``log_every_n_steps=1``); ``self.log("val_loss", ...)`` is the validation epoch's mean.

Each training step prints ``step G loss L``, G being ``trainer.global_step`` inside
``training_step`` (the step Lightning gives its loggers), and each validation after the sanity
check prints ``val step G loss L`` with the mean of its batch losses.
"""

import json
import tempfile

import lightning as L
import torch
import torch.nn as nn
from lightning.pytorch.loggers import TensorBoardLogger
from torch.utils.data import DataLoader, TensorDataset

VOCAB, WIDTH, HIDDEN = 64, 32, 64
STEPS, BATCH, SEQ = 12, 4, 16


class TinyLM(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, VOCAB))
        self.losses, self.seen, self.val_batches = [], {"tokens": 0, "samples": 0}, []

    def forward(self, ids):
        return self.mlp(self.embed(ids))

    def _loss(self, ids):
        # next-token prediction: position t predicts token t + 1
        logits = self(ids)
        return nn.functional.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), ids[:, 1:].flatten())

    def training_step(self, batch, batch_idx):
        (ids,) = batch
        self.seen["tokens"] += ids.numel()
        self.seen["samples"] += ids.shape[0]
        self.seen.setdefault("seq_len", ids.shape[1])
        loss = self._loss(ids)
        self.log("train_loss", loss)
        self.losses.append(loss.item())
        print(f"step {self.trainer.global_step} loss {self.losses[-1]!r}", flush=True)
        return loss

    def validation_step(self, batch, batch_idx):
        (ids,) = batch
        loss = self._loss(ids)
        self.log("val_loss", loss)
        self.val_batches.append(loss.item())

    def on_validation_epoch_end(self):
        if not self.trainer.sanity_checking:
            mean = sum(self.val_batches) / len(self.val_batches)
            print(f"val step {self.trainer.global_step} loss {mean!r}", flush=True)
        self.val_batches = []

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.5)


def main():
    L.seed_everything(0, verbose=False)
    model = TinyLM()
    gen = torch.Generator().manual_seed(1)
    train = TensorDataset(torch.randint(0, VOCAB, (STEPS * BATCH, SEQ), generator=gen))
    held_out = TensorDataset(torch.randint(0, VOCAB, (2 * BATCH, SEQ), generator=gen))
    with tempfile.TemporaryDirectory() as tmpdir:
        trainer = L.Trainer(
            max_steps=STEPS, val_check_interval=4, num_sanity_val_steps=2,
            logger=TensorBoardLogger(tmpdir), log_every_n_steps=1, enable_progress_bar=False,
            enable_model_summary=False, enable_checkpointing=False, accelerator="cpu",
            devices=1, default_root_dir=tmpdir,
        )  # fmt: skip
        loaders = DataLoader(train, batch_size=BATCH), DataLoader(held_out, batch_size=BATCH)
        trainer.fit(model, *loaders)
    # one forward and backward per step: Embedding (no FLOPs counted) and two Linears, whose
    # input needs a gradient too (the embedding's output does), so backward = 2 x forward:
    # 3 x 2 x (B x T) x (WIDTH x HIDDEN + HIDDEN x VOCAB) = 3 x 2 x 64 x (2048 + 4096) = 2,359,296
    flops = 3 * 2 * BATCH * SEQ * (WIDTH * HIDDEN + HIDDEN * VOCAB)
    counts = {
        "steps": trainer.global_step,
        **model.seen,
        "losses": model.losses,
        "loss_series": "train_loss",
        # Lightning hands its loggers the step before the optimizer step (its TensorBoard file
        # holds the same numbers); the framework tap keeps them (docs/spec.md "Framework taps")
        "loss_first_step": 0,
        "params": sum(p.numel() for p in model.parameters()),
        "counted_flops": flops,
    }
    print("ZOO " + json.dumps(counts), flush=True)


if __name__ == "__main__":
    main()
