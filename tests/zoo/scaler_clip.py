"""nanoGPT's train.py update with its fp16 machinery on: torch.amp.GradScaler (on CPU) around
gradient accumulation, scaler.unscale_ then clip_grad_norm_, scaler.step, scaler.update; the
scale starts at the edge of float32 (2**127) and grows back after every good step
(growth_interval=1), so the first and the third iteration overflow to inf in the backward and
GradScaler skips their optimizer.step() (12 of 14 steps taken; the 1st and the 2nd step taken
each follow a skipped iteration). Guards steps = the optimizer steps actually taken, and their
tokens, losses and FLOPs.

The train loss of a taken step is its own micro-batches' (loss / accum) summed, unscaled: the
skipped iterations' gradients were zeroed and never reached the weights (their backward()
calls saw the scaled loss, which is not a train loss)."""

import torch
from _common import GPT, GPTConfig, get_batch, gpt_step_flops, text_tokens, zoo

max_iters, gradient_accumulation_steps, batch_size, grad_clip = 14, 2, 4, 1.0
torch.manual_seed(1337)
gen = torch.Generator().manual_seed(1337)
data = text_tokens()
config = GPTConfig(block_size=16)
model = GPT(config)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95))
scaler = torch.amp.GradScaler("cpu", init_scale=2.0**127, growth_interval=1)

tokens = samples = 0
taken, losses, tokens_per_taken = 0, [], []
pending_tokens = 0  # fed since the last step taken
X, Y = get_batch(data, batch_size, config.block_size, gen)
for iter_num in range(max_iters):
    step_loss = 0.0
    for _ in range(gradient_accumulation_steps):
        logits, loss = model(X, Y)
        loss = loss / gradient_accumulation_steps
        tokens, samples = tokens + X.numel(), samples + X.size(0)
        pending_tokens += X.numel()
        X, Y = get_batch(data, batch_size, config.block_size, gen)
        scaler.scale(loss).backward()
        step_loss += loss.item()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    scale = scaler.get_scale()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    skipped = scaler.get_scale() < scale  # GradScaler backs off exactly when it skipped
    if not skipped:
        taken += 1
        losses.append(step_loss)
        tokens_per_taken.append(pending_tokens)
        pending_tokens = 0
    lossf = loss.item() * gradient_accumulation_steps
    print(f"iter {iter_num}: loss {lossf:.4f}, scale {scale:.4g}, skipped {skipped}")

T = config.block_size
zoo(
    steps=taken,
    tokens=tokens,
    samples=samples,
    seq_len=T,
    params=sum(p.numel() for p in model.parameters()),
    losses=losses,
    loss_series="backward_loss",
    # the 3rd step taken: the micro-batches fed since the 2nd (_common.gpt_step_flops)
    counted_flops=gpt_step_flops(config, tokens_per_taken[2], T),
    attention="sdpa",
)
