"""Hugging Face ``Trainer`` on a tiny GPT-2 with variable-length, padded batches and gradient
accumulation, as the causal-LM fine-tuning examples run it (a collator pads each batch and masks
the pad in ``labels`` with -100); guards the token count over padded micro-batches, the
Trainer's logged loss, GPT-2's FLOPs conventions (its FFN width comes from the config's
``n_inner=None``, i.e. 4 x ``n_embd``) and attention counted on CPU with a padding mask.

``GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=100, n_positions=64))``,
random initialisation, nothing downloaded. 64 sequences of 6 to 40 random token ids, batch 4,
``gradient_accumulation_steps=2``, ``max_steps=8``, AdamW at the Trainer's defaults,
``logging_steps=1``, no evaluation, no checkpoints, ``report_to="none"``, CPU.

The hand count lives in a ``compute_loss`` override (the Trainer's documented place to customise
a step): every call with gradients enabled records its ``input_ids`` shape. At the end it prints
each logged loss as ``step N loss L`` from ``trainer.state.log_history``.
"""

import json
import random

import torch
from transformers import GPT2Config, GPT2LMHeadModel, PrinterCallback, Trainer, TrainingArguments

PAD, VOCAB = 0, 100
STEPS, BATCH, ACCUM = 8, 4, 2


class RaggedTokens(torch.utils.data.Dataset):
    """``n`` sequences of random ids in 1..VOCAB-1 (0 is the pad), lengths 6..40."""

    def __init__(self, n, seed):
        rng = random.Random(seed)
        self.rows = [[rng.randrange(1, VOCAB) for _ in range(rng.randint(6, 40))] for _ in range(n)]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return {"input_ids": self.rows[i]}


def pad_collate(features):
    """Right-pad to the longest row: ``input_ids``, ``attention_mask`` (1 = real token) and
    ``labels`` (the ids, -100 on the pad so the loss skips it)."""
    width = max(len(f["input_ids"]) for f in features)
    ids, mask, labels = [], [], []
    for f in features:
        row, pad = f["input_ids"], width - len(f["input_ids"])
        ids.append(row + [PAD] * pad)
        mask.append([1] * len(row) + [0] * pad)
        labels.append(row + [-100] * pad)
    return {"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(mask),
            "labels": torch.tensor(labels)}  # fmt: skip


class CountingTrainer(Trainer):
    """A ``Trainer`` that notes the shape of every training micro-batch the model sees."""

    shapes: list

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if torch.is_grad_enabled() and model.training:
            self.shapes.append(tuple(inputs["input_ids"].shape))
        return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)


def main():
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=VOCAB, n_positions=64,
                        bos_token_id=1, eos_token_id=1, pad_token_id=PAD)  # fmt: skip
    model = GPT2LMHeadModel(config)
    args = TrainingArguments(
        output_dir="hf_out", max_steps=STEPS, per_device_train_batch_size=BATCH,
        gradient_accumulation_steps=ACCUM, learning_rate=1e-3, logging_steps=1,
        save_strategy="no", report_to="none", use_cpu=True, seed=0, dataloader_num_workers=0,
        disable_tqdm=True,
    )  # fmt: skip
    trainer = CountingTrainer(model=model, args=args, train_dataset=RaggedTokens(64, 1),
                              data_collator=pad_collate)  # fmt: skip
    trainer.remove_callback(PrinterCallback)  # it prints train_runtime: stdout must not vary
    trainer.shapes = []
    trainer.train()
    history = trainer.state.log_history
    losses = [(e["step"], e["loss"]) for e in history if "loss" in e]
    for step, loss in losses:
        print(f"step {step} loss {loss!r}", flush=True)
    shapes = trainer.shapes
    # the counted step is the 3rd optimizer step: micro-batches 5 and 6. Per micro-batch of B x T
    # (d = 32, L = 2, V = 100): the four Conv1D per block (d->3d, d->d, d->4d, 4d->d: 12 d^2) and
    # the tied head (d->V), forward 2BT(12 L d^2 + d V), backward twice that (the first block's
    # input needs a gradient: the embeddings do); attention: in training GPT-2's attn_pdrop=0.1
    # makes CPU SDPA take its math path (the CPU flash kernel takes no dropout), two bmm of
    # 2 B T^2 d each per layer forward, twice in backward: 12 L B T^2 d
    d, L, V = config.n_embd, config.n_layer, config.vocab_size
    flops = sum(6 * b * t * (12 * L * d * d + d * V) + 12 * L * b * t * t * d
                for b, t in shapes[4:6])  # fmt: skip
    # every row of a micro-batch has its padded length T: sum over rows of T^2 / sum of T
    counts = {
        "steps": trainer.state.global_step,
        "tokens": sum(b * t for b, t in shapes),
        "samples": sum(b for b, _ in shapes),
        "seq_len": shapes[0][1],
        "seq_len_mean": sum(b * t * t for b, t in shapes) / sum(b * t for b, t in shapes),
        "losses": [loss for _, loss in losses],
        "loss_series": "loss",
        "params": sum(p.numel() for p in model.parameters()),
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
