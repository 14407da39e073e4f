"""nanoGPT's train.py as most people run it on a laptop: no wandb, nothing but a printed loss
(iter N: loss X), an estimate_loss() evaluation under @torch.no_grad() with model.eval() /
model.train() every eval_interval, and the fp16 GradScaler switched off; guards the train loss
taken from backward() (the backward_loss series) when no tracker reports one."""

from contextlib import nullcontext

import torch
from _common import GPT, GPTConfig, get_batch, gpt_step_flops, text_tokens, zoo

eval_interval, eval_iters, max_iters, batch_size = 5, 3, 12, 4
torch.manual_seed(1337)
gen = torch.Generator().manual_seed(1337)
data = text_tokens()
n = int(0.9 * len(data))
train_data, val_data = data[:n], data[n:]
config = GPTConfig()
model = GPT(config)
optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95))
ctx = nullcontext()  # device_type == "cpu"
scaler = torch.amp.GradScaler("cpu", enabled=False)  # dtype float32: the scaler is a no-op


@torch.no_grad()
def estimate_loss():
    out = {}
    model.eval()
    for split, source in (("train", train_data), ("val", val_data)):
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            X, Y = get_batch(source, batch_size, config.block_size, gen)
            with ctx:
                _, loss = model(X, Y)
            losses[k] = loss.item()
        out[split] = losses.mean()
    model.train()
    return out


tokens = samples = 0
losses = []
X, Y = get_batch(train_data, batch_size, config.block_size, gen)
iter_num = 0
while True:
    if iter_num % eval_interval == 0:
        est = estimate_loss()
        print(f"step {iter_num}: train loss {est['train']:.4f}, val loss {est['val']:.4f}")
    with ctx:
        logits, loss = model(X, Y)
    tokens, samples = tokens + X.numel(), samples + X.size(0)
    X, Y = get_batch(train_data, batch_size, config.block_size, gen)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    lossf = loss.item()
    losses.append(lossf)
    print(f"iter {iter_num}: loss {lossf:.4f}")
    iter_num += 1
    if iter_num >= max_iters:
        break

T = config.block_size
zoo(
    steps=max_iters,
    tokens=tokens,
    samples=samples,
    seq_len=T,
    params=sum(p.numel() for p in model.parameters()),
    losses=losses,
    loss_series="backward_loss",
    counted_flops=gpt_step_flops(config, batch_size * T, T),  # the 3rd step: 4 x 32 tokens
    attention="sdpa",
)
