"""nanoGPT's train.py loop (AdamW, cosine learning rate, gradient accumulation) around its GPT
with F.scaled_dot_product_attention; guards the counted FLOPs of SDPA attention ("sdpa") and
the model's shape read from a nanoGPT config."""

import math

import torch
from _common import GPT, GPTConfig, get_batch, gpt_step_flops, text_tokens, zoo

max_iters, warmup_iters, learning_rate, min_lr = 12, 3, 1e-3, 1e-4
batch_size, gradient_accumulation_steps = 4, 2


def get_lr(it):
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    ratio = (it - warmup_iters) / (max_iters - warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (learning_rate - min_lr)


torch.manual_seed(1337)
gen = torch.Generator().manual_seed(1337)
data = text_tokens()
config = GPTConfig(flash=True)
model = GPT(config)
optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.1)

tokens = samples = 0
losses = []
X, Y = get_batch(data, batch_size, config.block_size, gen)
for iter_num in range(max_iters):
    for group in optimizer.param_groups:
        group["lr"] = get_lr(iter_num)
    step_loss = 0.0
    for _ in range(gradient_accumulation_steps):
        logits, loss = model(X, Y)
        loss = loss / gradient_accumulation_steps
        tokens, samples = tokens + X.numel(), samples + X.size(0)
        X, Y = get_batch(data, batch_size, config.block_size, gen)
        loss.backward()
        step_loss += loss.item()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    losses.append(step_loss)
    print(f"iter {iter_num}: loss {loss.item() * gradient_accumulation_steps:.4f}")

T = config.block_size
zoo(
    steps=max_iters,
    tokens=tokens,
    samples=samples,
    seq_len=T,
    params=sum(p.numel() for p in model.parameters()),
    losses=losses,
    loss_series="backward_loss",
    # the 3rd step: its 2 micro-batches of batch_size x T tokens (_common.gpt_step_flops)
    counted_flops=gpt_step_flops(config, gradient_accumulation_steps * batch_size * T, T),
    attention="sdpa",
    model={"layers": 2, "width": 32, "heads": 2, "vocab": 256, "ffn": 128, "context": 32},
)
