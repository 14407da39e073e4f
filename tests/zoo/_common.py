"""Small pieces the zoo programs share, as a user's own project would keep them in a module of
its own: the ZOO line, the text as byte tokens, a nanoGPT-style GPT, and that GPT's executed
FLOPs per step by hand (what FlopCounterMode should count)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn
from torch.nn import functional as F

TEXT = Path(__file__).resolve().parents[2] / "examples" / "data" / "persuasion.txt"


def zoo(**figures) -> None:
    """Print the program's last stdout line: ``ZOO`` and its own counts as JSON (floats at
    repr precision)."""
    print("ZOO " + json.dumps(figures, sort_keys=True), flush=True)


def text_tokens(n_bytes: int = 1 << 16) -> torch.Tensor:
    """The first ``n_bytes`` bytes of the novel, as int64 token ids (vocabulary 256)."""
    return torch.tensor(list(TEXT.read_bytes()[:n_bytes]), dtype=torch.long)


def get_batch(data: torch.Tensor, batch_size: int, block_size: int, gen: torch.Generator):
    """nanoGPT's get_batch: random windows of ``block_size`` tokens and their next tokens,
    shapes (batch_size, block_size)."""
    ix = torch.randint(len(data) - block_size - 1, (batch_size,), generator=gen)
    x = torch.stack([data[i : i + block_size] for i in ix])
    y = torch.stack([data[i + 1 : i + 1 + block_size] for i in ix])
    return x, y


@dataclass
class GPTConfig:
    block_size: int = 32
    vocab_size: int = 256
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 32
    dropout: float = 0.0
    bias: bool = True
    flash: bool = True  # F.scaled_dot_product_attention; False: q @ k^T, mask, softmax, @ v


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.n_head, self.n_embd, self.flash = config.n_head, config.n_embd, config.flash
        if not self.flash:
            mask = torch.tril(torch.ones(config.block_size, config.block_size))
            self.register_buffer("bias", mask.view(1, 1, config.block_size, config.block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if self.flash:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = self.attn_dropout(F.softmax(att, dim=-1))
            y = att @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """nanoGPT's layout: token and position embeddings, blocks, final LayerNorm, an LM head
    tied to the token embedding; ``forward(idx, targets=None)`` gives ``(logits, loss)``."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                wpe=nn.Embedding(config.block_size, config.n_embd),
                h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
                ln_f=nn.LayerNorm(config.n_embd, bias=config.bias),
            )
        )
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, nn.Linear | nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            torch.nn.init.zeros_(module.bias)

    def embed(self, idx):
        pos = torch.arange(idx.size(1), dtype=torch.long)
        return self.transformer.wte(idx) + self.transformer.wpe(pos)

    def head(self, x, targets):
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss

    def forward(self, idx, targets=None):
        x = self.embed(idx)
        for block in self.transformer.h:
            x = block(x)
        return self.head(x, targets)


def gpt_step_flops(c: GPTConfig, tokens: int, seq_len: int) -> int:
    """Executed FLOPs of one training step of :class:`GPT` over ``tokens`` positions of
    sequences of ``seq_len``, as FlopCounterMode counts them, by hand.

    A matmul (m x k) @ (k x n) is 2 m k n FLOPs; per token (one row of m) 2 k n. Forward:
    per layer the four Linear layers, d -> 3d, d -> d, d -> 4d, 4d -> d: 2 (3 + 1 + 4 + 4) d^2
    = 24 d^2 (a bias is an addition, not counted); the LM head d -> V: 2 d V (the tied
    embedding is a lookup). Backward: twice each (the input's gradient and the weight's; every
    Linear's input needs a gradient, as the embeddings train). Attention per layer and token,
    summed over heads: Q K^T against seq_len keys is 2 T d, the scores times V 2 T d (torch
    counts the full T x T square, causal or not). Its backward is 2x for hand-written
    matmuls (8 T d: total 12 T d), and five products for the SDPA kernel (torch's formula:
    the gradients' four and the recompute of Q K^T, 10 T d: total 14 T d). LayerNorm, GELU,
    softmax, masked_fill and the loss are not matmuls.
    Total: tokens x (3 (24 L d^2 + 2 d V) + (14 or 12) L T d).
    """
    d, L, V, T = c.n_embd, c.n_layer, c.vocab_size, seq_len
    attention = (14 if c.flash else 12) * L * T * d
    return tokens * (3 * (24 * L * d * d + 2 * d * V) + attention)
