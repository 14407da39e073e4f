"""Sequence-length warm-up (short sequences first, the length doubling every few steps up to
the context, as in Li et al.'s "sequence length warmup" and several GPT training recipes);
guards seq_len (the FIRST batch's length) and seq_len_mean (token-weighted over the run)."""

import torch
from _common import GPT, GPTConfig, get_batch, gpt_step_flops, text_tokens, zoo

torch.manual_seed(1337)
gen = torch.Generator().manual_seed(8)
data = text_tokens()
config = GPTConfig(block_size=32)
model = GPT(config)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
B, STEPS, START, EVERY = 4, 12, 8, 4


def seq_len_at(step):
    return min(config.block_size, START * 2 ** (step // EVERY))


tokens = samples = 0
lengths, losses = [], []
for step in range(STEPS):
    T = seq_len_at(step)
    x, y = get_batch(data, B, T, gen)
    _, loss = model(x, y)
    tokens, samples = tokens + x.numel(), samples + x.size(0)
    lengths += [T] * B
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    losses.append(loss.item())
    print(f"step {step} seq_len {T} loss {losses[-1]:.6f}")

# 16 sequences each of 8, 16, 32: sum T^2 / sum T = 16 (64 + 256 + 1024) / 16 (8 + 16 + 32)
# = 1344 / 56 = 24.0
zoo(
    steps=STEPS,
    tokens=tokens,
    samples=samples,
    seq_len=START,
    seq_len_mean=sum(t * t for t in lengths) / sum(lengths),
    params=sum(p.numel() for p in model.parameters()),
    losses=losses,
    loss_series="backward_loss",
    counted_flops=gpt_step_flops(config, B * START, START),  # the 3rd step: 4 x 8 tokens
    attention="sdpa",
)
