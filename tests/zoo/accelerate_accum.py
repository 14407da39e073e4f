"""Hugging Face Accelerate with ``Accelerator(gradient_accumulation_steps=4)``,
``with accelerator.accumulate(model):`` and ``accelerator.backward(loss)``, as accelerate's
by_feature/gradient_accumulation.py example writes it; guards the step count (accelerate's
``AcceleratedOptimizer.step`` calls the wrapped optimizer only when ``sync_gradients`` is set,
so 3 of every 4 ``optimizer.step()`` calls are skipped) and the tokens of every micro-batch.

A tiny sequence classifier (token embedding, a per-token Linear and GELU, mean over the
sequence, a Linear to 2 classes) on random ids, 22 batches of 8 x 24 (shuffled by the prepared
``DataLoader``), AdamW with a linear schedule stepped beside it. 22 batches at 4 per step are 5
full steps and a last one of 2 micro-batches, which accelerate steps at the end of the
dataloader. ``accelerator.backward`` divides the loss by 4 before ``backward()``; each real
optimizer step prints ``step N loss L``: the sum over its micro-batches of the value
``backward()`` was called on.
"""

import json

import torch
import torch.nn as nn
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch.utils.data import DataLoader, TensorDataset

VOCAB, WIDTH, HIDDEN, CLASSES = 80, 32, 64, 2
BATCHES, BATCH, SEQ, ACCUM = 22, 8, 24, 4


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.proj = nn.Linear(WIDTH, HIDDEN)
        self.head = nn.Linear(HIDDEN, CLASSES)

    def forward(self, input_ids):
        hidden = nn.functional.gelu(self.proj(self.embed(input_ids)))
        return self.head(hidden.mean(dim=1))


def main():
    set_seed(0)
    accelerator = Accelerator(gradient_accumulation_steps=ACCUM, cpu=True)
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (BATCHES * BATCH, SEQ), generator=gen)
    labels = torch.randint(0, CLASSES, (BATCHES * BATCH,), generator=gen)
    loader = DataLoader(TensorDataset(ids, labels), batch_size=BATCH, shuffle=True)
    model = Classifier()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, 1.0, 0.1, total_iters=6)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    steps, step_loss, losses = 0, 0.0, []
    seen = {"tokens": 0, "samples": 0}
    model.train()
    for batch_ids, batch_labels in loader:
        with accelerator.accumulate(model):
            seen["tokens"] += batch_ids.numel()
            seen["samples"] += batch_ids.shape[0]
            seen.setdefault("seq_len", batch_ids.shape[1])
            loss = nn.functional.cross_entropy(model(batch_ids), batch_labels)
            accelerator.backward(loss)
            # what accelerator.backward called backward() on: the loss / ACCUM (same float32 op)
            step_loss += (loss / accelerator.gradient_accumulation_steps).item()
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            if accelerator.sync_gradients:  # the wrapped optimizer really stepped
                steps += 1
                losses.append(step_loss)
                print(f"step {steps} loss {step_loss!r}", flush=True)
                step_loss = 0.0
    # the 3rd step: 4 micro-batches of B x T; per micro-batch the two Linears forward
    # 2 B (T WIDTH HIDDEN + HIDDEN CLASSES), backward twice that (the embedding's output needs
    # a gradient, so proj's input gradient is computed):
    # 4 x 6 x 8 x (24 x 32 x 64 + 64 x 2) = 4 x 6 x 8 x 49,280 = 9,461,760
    flops = ACCUM * 6 * BATCH * (SEQ * WIDTH * HIDDEN + HIDDEN * CLASSES)
    counts = {
        "steps": steps,
        **seen,
        "losses": losses,
        "loss_series": "backward_loss",
        "params": sum(p.numel() for p in model.parameters()),
        "counted_flops": flops,
    }
    print("ZOO " + json.dumps(counts), flush=True)


if __name__ == "__main__":
    main()
