"""DistributedDataParallel on the gloo backend, two CPU ranks under torchrun, with a
DistributedSampler, as PyTorch's DDP tutorial ("Getting Started with Distributed Data
Parallel") and its torchrun examples write it; guards one agent per rank, rank 0 as the step
clock and the tokens of the whole world.

launch: torchrun --nproc_per_node=2

A tiny next-token model (embedding, Linear, GELU, Linear to the vocabulary) wrapped in
``DistributedDataParallel``; 64 random sequences of 16 ids split by ``DistributedSampler``
(seeded shuffle, ``set_epoch``), batch 4 per rank, 8 steps per rank, SGD with momentum.
Rank 0 prints ``step N loss L`` (its own loss) and, last, the ZOO line, whose token and sample
counts are summed over the ranks with ``dist.all_reduce``; the other rank prints nothing.
"""

import gc
import json

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

VOCAB, WIDTH, HIDDEN = 64, 32, 64
SAMPLES, BATCH, SEQ = 64, 4, 16


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, VOCAB))

    def forward(self, ids):
        return self.mlp(self.embed(ids))


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    gen = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randint(0, VOCAB, (SAMPLES, SEQ), generator=gen))
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=2)
    loader = DataLoader(data, batch_size=BATCH, sampler=sampler)
    inner = TinyLM()
    model = DDP(inner)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sampler.set_epoch(0)
    steps, losses, first_seq = 0, [], None
    seen = torch.zeros(2, dtype=torch.long)  # tokens, samples on this rank
    for (ids,) in loader:
        logits = model(ids)
        targets = ids[:, 1:].reshape(-1)  # next-token prediction
        loss = nn.functional.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        steps += 1
        seen += torch.tensor([ids.numel(), ids.shape[0]])
        first_seq = first_seq or ids.shape[1]
        losses.append(loss.item())
        if rank == 0:
            print(f"step {steps} loss {losses[-1]!r}", flush=True)
    dist.all_reduce(seen)  # SUM: the world's tokens and samples
    if rank == 0:
        # rank 0's 3rd step, one batch of B x T: two Linears forward 2 B T (WIDTH HIDDEN +
        # HIDDEN VOCAB), backward twice that (the embedding's output needs a gradient):
        # 3 x 2 x 4 x 16 x (2048 + 4096) = 2,359,296
        flops = 3 * 2 * BATCH * SEQ * (WIDTH * HIDDEN + HIDDEN * VOCAB)
        counts = {
            "steps": steps,
            "tokens": int(seen[0]),
            "samples": int(seen[1]),
            "seq_len": first_seq,
            "losses": losses,
            "loss_series": "backward_loss",
            "params": sum(p.numel() for p in inner.parameters()),
            "counted_flops": flops,
        }
        print("ZOO " + json.dumps(counts), flush=True)
    # the wrapped model holds the process group: collected now, not in the interpreter's last
    # garbage collection, where a gloo worker thread that drops the last reference to a tensor
    # aborts the rank (seen with FSDP2 here: fsdp2_gloo.py)
    del model, optimizer
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
