"""A nanoGPT-style GPT whose vocabulary is exactly 4 x its width (64 = 4 x 16), so the LM head
d -> V and the MLP's d -> 4d are Linear layers of the same shape; guards the model's shape
(ffn, vocab) read from it and the counted FLOPs."""

import torch
from _common import GPT, GPTConfig, gpt_step_flops, zoo

torch.manual_seed(0)
gen = torch.Generator().manual_seed(0)
config = GPTConfig(vocab_size=64, n_embd=16, n_head=2, n_layer=3, block_size=16)
model = GPT(config)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
batch_size, steps = 4, 10

tokens = samples = 0
losses = []
for step in range(1, steps + 1):
    idx = torch.randint(0, config.vocab_size, (batch_size, config.block_size + 1), generator=gen)
    x, y = idx[:, :-1], idx[:, 1:]
    _, loss = model(x, y)
    tokens, samples = tokens + x.numel(), samples + x.size(0)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    losses.append(loss.item())
    print(f"step {step} loss {losses[-1]:.6f}")

T = config.block_size
zoo(
    steps=steps,
    tokens=tokens,
    samples=samples,
    seq_len=T,
    params=sum(p.numel() for p in model.parameters()),
    losses=losses,
    loss_series="backward_loss",
    counted_flops=gpt_step_flops(config, batch_size * T, T),  # the 3rd step: 4 x 16 tokens
    attention="sdpa",
    # from the config: the MLP is 4 x 16 = 64 wide, as wide as the vocabulary
    model={"layers": 3, "width": 16, "heads": 2, "vocab": 64, "ffn": 64, "context": 16},
)
