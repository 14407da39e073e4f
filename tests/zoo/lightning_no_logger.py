"""Lightning ``Trainer(logger=False)`` with gradient accumulation and clipping, as Lightning's
docs on accumulation and clipping set them up; guards the closure path (the optimizer steps
through ``optimizer.step(closure)``, and with ``accumulate_grad_batches=2`` the first micro-batch
of each step runs its closure outside ``step``), which crashed the first optimizer step under
tm when the sanity check's ``model.eval()`` came first.

A tiny language model (embedding, Linear, GELU, Linear to the vocabulary) on random token ids:
8 optimizer steps of 2 micro-batches of 4 x 16 tokens, AdamW, ``gradient_clip_val=1.0``,
validation every 8 batches on 2 batches, the default 2-batch sanity check.
``self.log("train_loss", ...)`` every batch; Lightning hands its logger connector the value of
the step's last micro-batch, once per optimizer step (``update_train_step_metrics`` returns
early while accumulating), at ``trainer.global_step`` before that step.

Each micro-batch prints ``step G micro M loss L`` (G = ``trainer.global_step``, M = 0 or 1).
"""

import json

import lightning as L
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

VOCAB, WIDTH, HIDDEN = 64, 32, 64
STEPS, ACCUM, BATCH, SEQ = 8, 2, 4, 16


class TinyLM(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, VOCAB))
        self.step_losses, self.seen = [], {"tokens": 0, "samples": 0}

    def forward(self, ids):
        return self.mlp(self.embed(ids))

    def _loss(self, ids):
        logits = self(ids)
        return nn.functional.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), ids[:, 1:].flatten())

    def training_step(self, batch, batch_idx):
        (ids,) = batch
        self.seen["tokens"] += ids.numel()
        self.seen["samples"] += ids.shape[0]
        self.seen.setdefault("seq_len", ids.shape[1])
        loss = self._loss(ids)
        self.log("train_loss", loss)
        value, micro = loss.item(), batch_idx % ACCUM
        if micro == ACCUM - 1:  # the value Lightning logs for this optimizer step
            self.step_losses.append(value)
        print(f"step {self.trainer.global_step} micro {micro} loss {value!r}", flush=True)
        return loss

    def validation_step(self, batch, batch_idx):
        (ids,) = batch
        self.log("val_loss", self._loss(ids))

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-2)


def main():
    L.seed_everything(0, verbose=False)
    model = TinyLM()
    gen = torch.Generator().manual_seed(1)
    train = TensorDataset(torch.randint(0, VOCAB, (STEPS * ACCUM * BATCH, SEQ), generator=gen))
    held_out = TensorDataset(torch.randint(0, VOCAB, (2 * BATCH, SEQ), generator=gen))
    trainer = L.Trainer(
        max_steps=STEPS, accumulate_grad_batches=ACCUM, gradient_clip_val=1.0, logger=False,
        log_every_n_steps=1, val_check_interval=8, enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False, accelerator="cpu", devices=1,
    )  # fmt: skip
    trainer.fit(model, DataLoader(train, batch_size=BATCH), DataLoader(held_out, batch_size=BATCH))
    # the counted (3rd) optimizer step runs 2 micro-batches, each one forward and backward of
    # two Linears (the Embedding adds no counted FLOPs; its output needs a gradient, so each
    # Linear's backward is 2 x its forward):
    # ACCUM x 3 x 2 x (B x T) x (WIDTH x HIDDEN + HIDDEN x VOCAB)
    # = 2 x 3 x 2 x 64 x 6144 = 4,718,592
    flops = ACCUM * 3 * 2 * BATCH * SEQ * (WIDTH * HIDDEN + HIDDEN * VOCAB)
    counts = {
        "steps": trainer.global_step,
        **model.seen,
        "losses": model.step_losses,
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
