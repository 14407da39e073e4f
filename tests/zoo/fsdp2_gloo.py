"""FSDP2 (``torch.distributed.fsdp.fully_shard``) on the gloo backend, two CPU ranks under
torchrun: each transformer block sharded, then the root, on a 1-D device mesh, as torchtitan's
``apply_fsdp`` and PyTorch's FSDP2 tutorial do; guards discovery of a root whose class
fully_shard replaced (``FSDP<name>``) and whose parameters are DTensor shards, one agent per
rank, and attention counted through ``F.scaled_dot_product_attention``.

launch: torchrun --nproc_per_node=2

A tiny pre-norm GPT (token and position embeddings, 2 blocks of causal self-attention with
``scaled_dot_product_attention(is_causal=True)`` and a 4x MLP, no biases, a final norm and an
untied head), width 32, 4 heads, vocabulary 64, context 16. Each rank trains on its own random
batches (4 x 16, seeded by rank), 6 steps of AdamW. Rank 0 prints ``step N loss L`` (its own
loss) and, last, the ZOO line, whose token and sample counts are summed over the ranks with
``dist.all_reduce``; the other rank prints nothing.
"""

import gc
import json

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

VOCAB, WIDTH, HEADS, LAYERS, CONTEXT = 64, 32, 4, 2, 16
STEPS, BATCH = 6, 4


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n_head = HEADS  # nanoGPT's and torchtitan's attention keep their head count
        self.norm1, self.norm2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH, bias=False)
        self.out = nn.Linear(WIDTH, WIDTH, bias=False)
        self.up = nn.Linear(WIDTH, 4 * WIDTH, bias=False)
        self.down = nn.Linear(4 * WIDTH, WIDTH, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(WIDTH, dim=2)
        heads = self.n_head
        q, k, v = (z.view(b, t, heads, WIDTH // heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(y.transpose(1, 2).reshape(b, t, WIDTH))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class TinyGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, WIDTH)
        self.pos = nn.Embedding(CONTEXT, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, ids):
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)  # the same full model on every rank before sharding
    model = TinyGPT()
    params = sum(p.numel() for p in model.parameters())  # before sharding: the whole model
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(100 + rank)
    losses, seen = [], torch.zeros(2, dtype=torch.long)
    for step in range(1, STEPS + 1):
        ids = torch.randint(0, VOCAB, (BATCH, CONTEXT), generator=gen)
        logits = model(ids)
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        seen += torch.tensor([ids.numel(), ids.shape[0]])
        losses.append(loss.item())
        if rank == 0:
            print(f"step {step} loss {losses[-1]!r}", flush=True)
    dist.all_reduce(seen)  # SUM: the world's tokens and samples
    if rank == 0:
        # rank 0's 3rd step, one batch of B x T (d = 32, L = 2, V = 64): per block the Linears
        # qkv, out, up, down (3 + 1 + 4 + 4 = 12 d^2), and the head (d V), forward
        # 2 B T (12 L d^2 + d V), backward twice that; attention with torch's flash formula,
        # forward 2 products of 2 B T^2 d, backward 5 (Q K^T recomputed): 14 L B T^2 d
        b, t, d = BATCH, CONTEXT, WIDTH
        flops = 6 * b * t * (12 * LAYERS * d * d + d * VOCAB) + 14 * LAYERS * b * t * t * d
        counts = {
            "steps": STEPS,
            "tokens": int(seen[0]),
            "samples": int(seen[1]),
            "seq_len": CONTEXT,
            "losses": losses,
            "loss_series": "backward_loss",
            "params": params,
            "counted_flops": flops,
            "attention": "sdpa",
            "model": {
                "layers": LAYERS,
                "width": WIDTH,
                "heads": HEADS,
                "ffn": 4 * WIDTH,
                "vocab": VOCAB,
                "tied_embeddings": False,
            },
        }
        print("ZOO " + json.dumps(counts), flush=True)
    # FSDP's state holds the device mesh and with it the gloo process group, in reference
    # cycles: left to the interpreter's last garbage collection, a gloo worker thread could
    # drop the last reference to a tensor then, need the GIL while Python finalizes, and abort
    # the rank ("terminate called without an active exception"; about 1 run in 4 here, torch
    # 2.13). Collected here, the group's threads are joined before the interpreter exits.
    del model, optimizer, mesh, block
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
