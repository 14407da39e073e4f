"""A tiny byte-level GPT (nanoGPT style) trained on a public-domain novel.

The example run for trainmeter. It runs unchanged without trainmeter installed:

    python examples/train_gpt.py            # plain
    tm -- python examples/train_gpt.py      # watched by trainmeter
    tm -- torchrun --nproc_per_node=4 examples/train_gpt.py   # data parallel (gloo on CPU)

Prints one `step N loss X` line per optimizer step and `step N val_loss X` every --eval-every steps
(under torchrun, rank 0 prints the mean over ranks, which all-reduce makes the same on each).
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel

try:
    import trainmeter
except ImportError:
    trainmeter = None

DEFAULT_DATA = Path(__file__).resolve().parent / "data" / "persuasion.txt"


@dataclass
class GPTConfig:
    vocab_size: int = 256  # bytes
    block_size: int = 128
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.n_head = config.n_head
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                wpe=nn.Embedding(config.block_size, config.n_embd),
                h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
                ln_f=nn.LayerNorm(config.n_embd),
            )
        )
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying, as in GPT-2
        self.apply(self._init_weights)
        for name, p in self.named_parameters():  # GPT-2's scaled init of the residual projections
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / (2 * config.n_layer) ** 0.5)

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


def get_batch(data, batch_size, seq_len, gen):
    """Random windows of data: inputs (B, T) and next-byte targets (B, T), on data's device."""
    starts = torch.randint(len(data) - seq_len, (batch_size,), generator=gen, device=data.device)
    window = data[starts[:, None] + torch.arange(seq_len + 1, device=data.device)]
    return window[:, :-1], window[:, 1:]


def compute_loss(model, x, y, autocast):
    with autocast():
        logits = model(x)
    return F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.reshape(-1))


@torch.no_grad()
def estimate_val_loss(model, batches, autocast):
    """Mean loss over fixed held-out batches, as a 0-d tensor on the device (no sync)."""
    model.eval()
    losses = torch.stack([compute_loss(model, x, y, autocast) for x, y in batches])
    model.train()
    return losses.mean()


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=300, help="optimizer steps (~50 s on 2 CPU cores)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--eval-every", type=int, default=20, help="0 disables evaluation")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--fail-at-step", type=int, default=None, help="raise after step K (for tests)")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    return p.parse_args(argv)


def report(step: int, host: list[float], emit) -> None:
    """Print (and, under trainmeter, emit) the step's train loss and, when present, val loss."""
    print(f"step {step} loss {host[0]:.6f}", flush=True)
    if emit is not None:
        emit(train_loss=host[0])
    if len(host) > 1:
        print(f"step {step} val_loss {host[1]:.6f}", flush=True)
        if emit is not None:
            emit(val_loss=host[1])


def init_distributed(device: str) -> tuple[int, int, str]:
    """(rank, world size, device) under torchrun (``WORLD_SIZE`` > 1), else (0, 1, device).

    One process per rank: NCCL on GPUs (one each, by ``LOCAL_RANK``), gloo on CPU.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return 0, 1, device
    if device == "cuda":
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
    dist.init_process_group("nccl" if device.startswith("cuda") else "gloo")
    return dist.get_rank(), world, device


def main(argv=None):
    args = parse_args(argv)
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    rank, world, device = init_distributed(device)
    # Seeded, and deterministic on a given machine: no torch.set_num_threads, as CPU kernels are
    # deterministic for a fixed thread count. A different count (OMP_NUM_THREADS) changes the
    # reduction order, so losses may differ in the last digits between machines.
    torch.manual_seed(args.seed)
    emit = getattr(trainmeter, "emit", None)

    def autocast():
        return torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.startswith("cuda"))

    raw = torch.frombuffer(bytearray(args.data.read_bytes()), dtype=torch.uint8)
    data = raw.to(device=device, dtype=torch.long)
    n_val = len(data) // 10  # the last 10% is held out for validation
    train_data, val_data = data[:-n_val], data[-n_val:]

    config = GPTConfig(block_size=args.seq_len)
    model = GPT(config).to(device)  # the same seeded weights on every rank
    if world > 1:
        model = DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95))
    n_params = sum(p.numel() for p in model.parameters())
    if rank == 0:
        print(
            f"# {n_params:,} parameters, {len(train_data):,} train bytes, device {device}, "
            f"{args.batch_size * args.seq_len * args.grad_accum * world} tokens/step"
            + (f" ({world} ranks)" if world > 1 else ""),
            file=sys.stderr,
            flush=True,
        )

    # Own seeded generators: the batch stream depends on --seed (and the rank) only, not on
    # model init or eval. Every rank validates on the same held-out batches.
    train_gen = torch.Generator(device=device).manual_seed(args.seed + 1000 * rank)
    val_gen = torch.Generator(device=device).manual_seed(args.seed + 1)
    val_batches = [get_batch(val_data, args.batch_size, args.seq_len, val_gen) for _ in range(4)]

    for step in range(1, args.steps + 1):
        loss_sum = torch.zeros((), device=device)
        for _ in range(args.grad_accum):
            x, y = get_batch(train_data, args.batch_size, args.seq_len, train_gen)
            loss = compute_loss(model, x, y, autocast) / args.grad_accum
            loss.backward()
            loss_sum += loss.detach()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

        values = [loss_sum]
        is_eval = args.eval_every > 0 and step % args.eval_every == 0
        if is_eval:
            values.append(estimate_val_loss(model, val_batches, autocast))
        stacked = torch.stack(values)
        if world > 1:  # the mean over ranks, the same on every rank after the all-reduce
            dist.all_reduce(stacked)
            stacked /= world
        # The device sync point: one copy to the host per step brings back every number printed.
        host = stacked.tolist()
        if rank == 0:
            report(step, host, emit)
        if args.fail_at_step is not None and step == args.fail_at_step:
            raise RuntimeError(f"deliberate failure at step {step}")
    if world > 1:
        # Every rank waits here for the others' last all-reduce: a gloo worker thread still
        # releasing that step's tensors when the interpreter exits needs the GIL then and
        # aborts the rank ("terminate called without an active exception", torch 2.13). The
        # barrier makes that rare, not impossible: DDP keeps the group alive to the end.
        dist.barrier()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
