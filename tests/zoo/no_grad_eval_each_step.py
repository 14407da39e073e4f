"""A loop that checks a held-out batch inside every step, between backward() and
optimizer.step(), under torch.no_grad() (the model called again, without a mode switch), as
quick research scripts do; guards that these forwards are neither training tokens nor part of
the counted step's FLOPs (which must be the training forward and backward only)."""

import torch
from _common import GPT, GPTConfig, get_batch, gpt_step_flops, text_tokens, zoo

torch.manual_seed(0)
gen = torch.Generator().manual_seed(21)
data = text_tokens()
train_data, val_data = data[:60000], data[60000:]
config = GPTConfig(n_layer=1, block_size=16)
model = GPT(config)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
B, VAL_B, STEPS = 4, 8, 10
val_x, val_y = get_batch(val_data, VAL_B, config.block_size, gen)

tokens = samples = 0
losses = []
for step in range(1, STEPS + 1):
    x, y = get_batch(train_data, B, config.block_size, gen)
    _, loss = model(x, y)
    tokens, samples = tokens + x.numel(), samples + x.size(0)
    loss.backward()
    with torch.no_grad():
        _, val_loss = model(val_x, val_y)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    losses.append(loss.item())
    print(f"step {step} loss {losses[-1]:.6f} val {val_loss.item():.6f}")

T = config.block_size
zoo(
    steps=STEPS,
    tokens=tokens,
    samples=samples,
    seq_len=T,
    params=sum(p.numel() for p in model.parameters()),
    losses=losses,
    loss_series="backward_loss",
    # the 3rd step's training batch only, 4 x 16 tokens (_common.gpt_step_flops); the
    # no-grad forward of the 8 x 16 held-out batch is not training
    counted_flops=gpt_step_flops(config, B * T, T),
    attention="sdpa",
)
