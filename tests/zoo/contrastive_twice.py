"""Contrastive learning with two views of each example per step (SimCLR's two augmentations;
here SimCSE-style, token dropout on the same sentences): the encoder is called twice per
step, both calls with gradients, one InfoNCE loss, one optimizer; guards tokens and samples
counting both calls and the step's FLOPs covering both."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import zoo

V, D, P, B, T, STEPS, TAU = 60, 16, 8, 6, 10, 10, 0.1


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.proj = nn.Sequential(nn.Linear(D, D), nn.ReLU(), nn.Linear(D, P))

    def forward(self, idx):
        return F.normalize(self.proj(self.emb(idx).mean(dim=1)), dim=-1)


def augment(x, gen):
    keep = torch.rand(x.shape, generator=gen) > 0.2
    return torch.where(keep, x, torch.zeros_like(x))  # token 0 stands for a dropped word


torch.manual_seed(0)
gen = torch.Generator().manual_seed(19)
model = Encoder()
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
tokens = samples = 0
losses = []
for step in range(1, STEPS + 1):
    x = torch.randint(1, V, (B, T), generator=gen)
    v1, v2 = augment(x, gen), augment(x, gen)
    z1, z2 = model(v1), model(v2)
    tokens, samples = tokens + v1.numel() + v2.numel(), samples + v1.size(0) + v2.size(0)
    logits = z1 @ z2.t() / TAU
    labels = torch.arange(B)
    loss = (F.cross_entropy(logits, labels) + F.cross_entropy(logits.t(), labels)) / 2
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
    print(f"step {step} loss {losses[-1]:.6f}")

# The 3rd step, by hand: the projection runs once per sequence (after the mean over tokens):
# D -> D 2*16*16 = 512 and D -> P 2*16*8 = 256 per sequence, x3 with the backward, for the
# 2 x 6 sequences of both views: 12 * 2,304 = 27,648; the similarity matrix z1 @ z2^T is
# 2 B P B = 2*6*8*6 = 576, x3 (both inputs need gradients) = 1,728. Total 29,376.
zoo(
    steps=STEPS,
    tokens=tokens,
    samples=samples,
    seq_len=T,
    params=sum(p.numel() for p in model.parameters()),
    losses=losses,
    loss_series="backward_loss",
    counted_flops=3 * (2 * D * D + 2 * D * P) * 2 * B + 3 * 2 * B * P * B,
    attention="none counted",
)
