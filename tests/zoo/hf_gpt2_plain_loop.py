"""A plain PyTorch loop around a Hugging Face ``GPT2LMHeadModel`` called with keyword arguments
only (``model(input_ids=..., attention_mask=..., labels=...)``) on padded batches, as the
"training loop in native PyTorch" of the Hugging Face course writes it; guards the token count
from the ``input_ids`` keyword, the model's shape read from ``model.config``, and the train
loss taken from ``backward()`` when nothing logs one.

``GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=48, n_head=4, vocab_size=96, n_positions=48))``,
random initialisation. A ``DataLoader`` over 48 sequences of 5 to 30 random ids, shuffled with a
seeded generator, batch 4, a collate function that right-pads each batch (``attention_mask`` 0
and ``labels`` -100 on the pad); AdamW, gradient clipping at 1.0, 12 steps. Each step prints
``step N loss L`` (``outputs.loss.item()``, the value ``backward()`` was called on).
"""

import json
import random

import torch
from torch.utils.data import DataLoader
from transformers import GPT2Config, GPT2LMHeadModel

PAD, VOCAB, WIDTH, LAYERS, CONTEXT = 0, 96, 48, 2, 48
STEPS, BATCH = 12, 4


def pad_collate(rows):
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), PAD)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        mask[i, : len(r)] = 1
    labels = ids.masked_fill(mask == 0, -100)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def main():
    torch.manual_seed(0)
    rng = random.Random(1)
    lengths = [rng.randint(5, 30) for _ in range(STEPS * BATCH)]
    rows = [[rng.randrange(1, VOCAB) for _ in range(n)] for n in lengths]
    loader = DataLoader(rows, batch_size=BATCH, shuffle=True, collate_fn=pad_collate,
                        generator=torch.Generator().manual_seed(2))  # fmt: skip
    config = GPT2Config(n_layer=LAYERS, n_embd=WIDTH, n_head=4, vocab_size=VOCAB,
                        n_positions=CONTEXT, bos_token_id=1, eos_token_id=1,
                        pad_token_id=PAD)  # fmt: skip
    model = GPT2LMHeadModel(config)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses, shapes = [], []
    for step, batch in enumerate(loader, start=1):
        outputs = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                        labels=batch["labels"])  # fmt: skip
        outputs.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(outputs.loss.item())
        shapes.append(tuple(batch["input_ids"].shape))
        print(f"step {step} loss {losses[-1]!r}", flush=True)
    # params by hand from the config (d = 48, L = 2, V = 96, P = 48; the head is tied to wte):
    # wte V d + wpe P d + L x (ln_1 2d + c_attn 3d^2 + 3d + attn c_proj d^2 + d + ln_2 2d
    # + c_fc 4d^2 + 4d + mlp c_proj 4d^2 + d) + ln_f 2d = V d + P d + L (12 d^2 + 13 d) + 2 d
    # = 4608 + 2304 + 2 x (27648 + 624) + 96 = 63,552
    d = WIDTH
    params = VOCAB * d + CONTEXT * d + LAYERS * (12 * d * d + 13 * d) + 2 * d
    # the 3rd step, one batch B x T: Conv1D and head forward 2BT(12 L d^2 + d V), backward twice
    # that; attention on CPU in training (attn_pdrop 0.1: SDPA's math path, two bmm of 2BT^2 d
    # per layer) 4 L B T^2 d forward, twice in backward
    b, t = shapes[2]
    flops = 6 * b * t * (12 * LAYERS * d * d + d * VOCAB) + 12 * LAYERS * b * t * t * d
    counts = {
        "steps": STEPS,
        "tokens": sum(b * t for b, t in shapes),
        "samples": sum(b for b, _ in shapes),
        "seq_len": shapes[0][1],
        "seq_len_mean": sum(b * t * t for b, t in shapes) / sum(b * t for b, t in shapes),
        "losses": losses,
        "loss_series": "backward_loss",
        "params": params,
        "counted_flops": flops,
        "attention": "matmul",
        # the shape from the config; GPT-2's MLP is n_inner, or 4 x n_embd when n_inner is None
        # (transformers models/gpt2/modeling_gpt2.py GPT2Block: inner_dim)
        "model": {
            "name": "GPT2LMHeadModel",
            "layers": config.n_layer,
            "width": config.n_embd,
            "heads": config.n_head,
            "ffn": config.n_inner or 4 * config.n_embd,
            "vocab": config.vocab_size,
            "context": config.n_positions,
            "tied_embeddings": True,
        },
    }
    print("ZOO " + json.dumps(counts), flush=True)


if __name__ == "__main__":
    main()
