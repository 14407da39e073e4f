"""An evaluation every N steps under torch.inference_mode() between model.eval() and
model.train(), as torchvision's reference scripts evaluate; guards the eval time span, that
inference-mode forwards are not training tokens, and the figures around them."""

import torch
from _common import GPT, GPTConfig, get_batch, gpt_step_flops, text_tokens, zoo

torch.manual_seed(1337)
gen = torch.Generator().manual_seed(51)
data = text_tokens()
train_data, val_data = data[:60000], data[60000:]
config = GPTConfig(n_layer=1, block_size=16)
model = GPT(config)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
B, STEPS, EVAL_EVERY, EVAL_BATCHES = 4, 12, 4, 4


def evaluate():
    model.eval()
    total = 0.0
    with torch.inference_mode():
        for _ in range(EVAL_BATCHES):
            x, y = get_batch(val_data, 8, config.block_size, gen)
            _, loss = model(x, y)
            total += loss.item()
    model.train()
    return total / EVAL_BATCHES


tokens = samples = 0
losses = []
model.train()
for step in range(1, STEPS + 1):
    x, y = get_batch(train_data, B, config.block_size, gen)
    _, loss = model(x, y)
    tokens, samples = tokens + x.numel(), samples + x.size(0)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
    print(f"step {step} loss {losses[-1]:.6f}")
    if step % EVAL_EVERY == 0:
        print(f"step {step} val_loss {evaluate():.6f}")

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
