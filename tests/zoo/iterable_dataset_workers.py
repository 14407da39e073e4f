"""An IterableDataset streaming token windows, split between DataLoader workers with
get_worker_info() (the PyTorch docs' IterableDataset example), num_workers=2 on the fork
start method; guards that forked workers count nothing twice and the loop's tokens come from
the batches it trained on."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import text_tokens, zoo
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

V, D, B, T, WINDOWS = 256, 16, 4, 12, 48


class TokenStream(IterableDataset):
    def __init__(self, data, start, end):
        super().__init__()
        self.data, self.start, self.end = data, start, end

    def __iter__(self):
        worker_info = get_worker_info()
        if worker_info is None:
            lo, hi = self.start, self.end
        else:  # split the windows evenly between the workers
            per_worker = math.ceil((self.end - self.start) / worker_info.num_workers)
            lo = self.start + worker_info.id * per_worker
            hi = min(lo + per_worker, self.end)
        for w in range(lo, hi):
            chunk = self.data[w * T : w * T + T + 1]
            yield chunk[:-1], chunk[1:]


class BigramLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.head = nn.Linear(D, V)

    def forward(self, idx):
        return self.head(self.emb(idx))


if __name__ == "__main__":
    torch.manual_seed(0)
    loader = DataLoader(TokenStream(text_tokens(8192), 0, WINDOWS), batch_size=B,
                        num_workers=2, multiprocessing_context="fork")  # fmt: skip
    model = BigramLM()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    tokens = samples = steps = 0
    losses = []
    for x, y in loader:
        loss = F.cross_entropy(model(x).view(-1, V), y.reshape(-1))
        tokens, samples = tokens + x.numel(), samples + x.size(0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        steps += 1
        losses.append(loss.item())
        print(f"step {steps} loss {losses[-1]:.6f} first token {x[0, 0].item()}")
    # the 3rd step: the Linear D -> V 2*16*256 = 8,192 a token, x3 with the backward, 48 tokens
    zoo(
        steps=steps,
        tokens=tokens,
        samples=samples,
        seq_len=T,
        params=sum(p.numel() for p in model.parameters()),
        losses=losses,
        loss_series="backward_loss",
        counted_flops=3 * 2 * D * V * B * T,
        attention="none counted",
    )
