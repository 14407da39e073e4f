"""Activation checkpointing per transformer block with
torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False), as nanoGPT forks and HF's
gradient_checkpointing do; guards the counted FLOPs, which include the recompute in the
backward (it runs), and an unchanged loop."""

import torch
from _common import GPT, GPTConfig, get_batch, text_tokens, zoo
from torch.utils.checkpoint import checkpoint


class CheckpointedGPT(GPT):
    def forward(self, idx, targets=None):
        x = self.embed(idx)
        for block in self.transformer.h:
            x = checkpoint(block, x, use_reentrant=False)
        return self.head(x, targets)


torch.manual_seed(1337)
gen = torch.Generator().manual_seed(31)
data = text_tokens()
config = GPTConfig(block_size=16)
model = CheckpointedGPT(config)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
B, STEPS = 4, 10
tokens = samples = 0
losses = []
for step in range(1, STEPS + 1):
    x, y = get_batch(data, B, config.block_size, gen)
    _, loss = model(x, y)
    tokens, samples = tokens + x.numel(), samples + x.size(0)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    losses.append(loss.item())
    print(f"step {step} loss {losses[-1]:.6f}")

# The 3rd step, by hand, per token (see _common.gpt_step_flops for the plain GPT: forward
# 24 L d^2 + 2 d V + 4 L T d, backward twice the matmuls plus 10 L T d for SDPA). The
# backward recomputes each block's forward, and torch's non-reentrant checkpoint stops the
# recompute once the last saved tensor is back (early stop, on by default): the block's last
# matmul, the MLP's 4d -> d projection (2 * 4 d^2 a token), whose output nothing saves, is not
# rerun. So the recompute is 24 d^2 - 8 d^2 = 16 d^2 of matmuls plus attention's 4 T d.
d, L, V, T = config.n_embd, config.n_layer, config.vocab_size, config.block_size
forward = 24 * L * d * d + 2 * d * V + 4 * L * T * d
backward = 2 * (24 * L * d * d + 2 * d * V) + 10 * L * T * d
recompute = 16 * L * d * d + 4 * L * T * d
zoo(
    steps=STEPS,
    tokens=tokens,
    samples=samples,
    seq_len=T,
    params=sum(p.numel() for p in model.parameters()),
    losses=losses,
    loss_series="backward_loss",
    counted_flops=(forward + backward + recompute) * B * T,
    attention="sdpa",
)
