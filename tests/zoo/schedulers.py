"""Learning-rate schedules as torchvision's classification reference and many fine-tuning
scripts chain them: AdamW with a linear warm-up (LambdaLR) handed to cosine decay
(CosineAnnealingLR) through SequentialLR, stepped every step, and ReduceLROnPlateau stepped on
the validation loss at every epoch's end; guards that the schedulers' own wrapping of
optimizer.step (and their "step before optimizer.step" warning) is untouched, and the figures."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import zoo

V, D, B, T, EPOCHS, STEPS_PER_EPOCH, WARMUP = 40, 16, 4, 10, 3, 4, 3


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.proj = nn.Linear(D, V)

    def forward(self, idx):
        return self.proj(self.emb(idx))


torch.manual_seed(0)
gen = torch.Generator().manual_seed(12)
model = TinyLM()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
warmup = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: (s + 1) / WARMUP)
cosine = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=EPOCHS * STEPS_PER_EPOCH)
scheduler = torch.optim.lr_scheduler.SequentialLR(optimizer, [warmup, cosine], [WARMUP])
plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=0)
val_x = torch.randint(0, V, (8, T), generator=gen)

tokens = samples = 0
losses = []
for epoch in range(EPOCHS):
    model.train()
    for i in range(STEPS_PER_EPOCH):
        x = torch.randint(0, V, (B, T), generator=gen)
        loss = F.cross_entropy(model(x).view(-1, V), x.flip(1).reshape(-1))
        tokens, samples = tokens + x.numel(), samples + x.size(0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
        lr = optimizer.param_groups[0]["lr"]
        print(f"epoch {epoch} step {i} loss {losses[-1]:.6f} lr {lr:.6g}")
    model.eval()
    with torch.no_grad():
        val_loss = F.cross_entropy(model(val_x).view(-1, V), val_x.flip(1).reshape(-1))
    plateau.step(val_loss)
    print(f"epoch {epoch} val_loss {val_loss.item():.6f}")

# the 3rd step, per token: the Linear D -> V 2*16*40 = 1,280, x3 with the backward (the
# embedding trains): 3,840 per token, 4 x 10 = 40 tokens
zoo(
    steps=EPOCHS * STEPS_PER_EPOCH,
    tokens=tokens,
    samples=samples,
    seq_len=T,
    params=sum(p.numel() for p in model.parameters()),
    losses=losses,
    loss_series="backward_loss",
    counted_flops=3 * 2 * D * V * B * T,
    attention="none counted",
)
