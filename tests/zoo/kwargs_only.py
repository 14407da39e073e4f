"""A Hugging Face-style model called with keywords only, model(input_ids=x,
attention_mask=m, labels=y), no positional argument, as HF custom loops do; guards the tokens,
samples and seq_len read from the input_ids keyword."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import zoo

V, D, B, T, STEPS = 50, 16, 4, 11, 10


class KwargsLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.head = nn.Linear(D, V)

    def forward(self, input_ids=None, attention_mask=None, labels=None):
        hidden = self.emb(input_ids) * attention_mask.unsqueeze(-1)
        logits = self.head(hidden)
        loss = F.cross_entropy(logits.view(-1, V), labels.view(-1), ignore_index=-100)
        return {"loss": loss, "logits": logits}


torch.manual_seed(0)
gen = torch.Generator().manual_seed(16)
model = KwargsLM()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
tokens = samples = 0
losses = []
for step in range(1, STEPS + 1):
    input_ids = torch.randint(0, V, (B, T), generator=gen)
    attention_mask = torch.ones(B, T, dtype=torch.long)
    attention_mask[0, -3:] = 0  # one padded row
    labels = input_ids.masked_fill(attention_mask == 0, -100)
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    tokens, samples = tokens + input_ids.numel(), samples + input_ids.size(0)  # pads included
    out["loss"].backward()
    optimizer.step()
    optimizer.zero_grad()
    losses.append(out["loss"].item())
    print(f"step {step} loss {losses[-1]:.6f}")

# the 3rd step: the Linear D -> V 2*16*50 = 1,600 a token, x3 with the backward, 44 tokens
zoo(
    steps=STEPS,
    tokens=tokens,
    samples=samples,
    seq_len=T,
    params=sum(p.numel() for p in model.parameters()),
    losses=losses,
    loss_series="backward_loss",
    counted_flops=3 * 2 * D * V * B * T,
)
