"""nanoGPT's GPT on its non-flash attention path (q @ k.transpose, masked_fill, softmax, @ v)
under a plain AdamW loop; guards attention counted as "matmul" and the counted FLOPs of the
hand-written attention (12 L T d per token, not the SDPA kernel's 14)."""

import torch
from _common import GPT, GPTConfig, get_batch, gpt_step_flops, text_tokens, zoo

torch.manual_seed(1337)
gen = torch.Generator().manual_seed(7)
data = text_tokens()
config = GPTConfig(flash=False, n_layer=2, n_head=4, n_embd=32, block_size=24)
model = GPT(config)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
batch_size, max_iters = 3, 10

tokens = samples = 0
losses = []
for iter_num in range(max_iters):
    X, Y = get_batch(data, batch_size, config.block_size, gen)
    logits, loss = model(X, Y)
    tokens, samples = tokens + X.numel(), samples + X.size(0)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
    print(f"iter {iter_num}: loss {losses[-1]:.4f}")

T = config.block_size
zoo(
    steps=max_iters,
    tokens=tokens,
    samples=samples,
    seq_len=T,
    params=sum(p.numel() for p in model.parameters()),
    losses=losses,
    loss_series="backward_loss",
    # the 3rd step: one batch of 3 x 24 tokens, hand-written attention (_common.gpt_step_flops)
    counted_flops=gpt_step_flops(config, batch_size * T, T),
    attention="matmul",
)
