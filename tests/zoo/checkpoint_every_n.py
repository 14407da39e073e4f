"""A checkpoint of the model's and the optimizer's state_dict every N steps with torch.save
(nanoGPT's ckpt.pt dict, to a temporary folder), and one reload at the end; guards the
checkpoint time span, and that saving trainmeter's watched optimizer pickles nothing of it."""

import os
import tempfile

import torch
from _common import GPT, GPTConfig, get_batch, gpt_step_flops, text_tokens, zoo

torch.manual_seed(1337)
gen = torch.Generator().manual_seed(41)
data = text_tokens()
config = GPTConfig(n_layer=1, block_size=16)
model = GPT(config)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
B, STEPS, EVERY = 4, 10, 3
tokens = samples = 0
losses = []
with tempfile.TemporaryDirectory() as out_dir:
    for iter_num in range(1, STEPS + 1):
        x, y = get_batch(data, B, config.block_size, gen)
        _, loss = model(x, y)
        tokens, samples = tokens + x.numel(), samples + x.size(0)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        print(f"iter {iter_num}: loss {losses[-1]:.4f}")
        if iter_num % EVERY == 0:
            checkpoint = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                          "iter_num": iter_num, "config": vars(config)}  # fmt: skip
            torch.save(checkpoint, os.path.join(out_dir, "ckpt.pt"))
            print(f"saving checkpoint at iter {iter_num}")
    ckpt = torch.load(os.path.join(out_dir, "ckpt.pt"), weights_only=False)
    optimizer.load_state_dict(ckpt["optimizer"])
    print(f"reloaded iter {ckpt['iter_num']}, {len(ckpt['optimizer']['state'])} param states")

T = config.block_size
zoo(
    steps=STEPS,
    tokens=tokens,
    samples=samples,
    seq_len=T,
    params=sum(p.numel() for p in model.parameters()),
    losses=losses,
    loss_series="backward_loss",
    counted_flops=gpt_step_flops(config, B * T, T),  # the 3rd step: 4 x 16 tokens
    attention="sdpa",
)
