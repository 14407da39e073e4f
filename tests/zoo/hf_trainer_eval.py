"""Hugging Face ``Trainer`` with ``eval_strategy="steps"`` on a tiny byte-level GPT-2, as the
run_clm language-modelling example trains with evaluation during training; guards the
evaluation phases (the Trainer's ``model.eval()`` ... its next ``model.train()``), which must
show as eval time, and the ``eval_loss`` series beside the train ``loss``.

``GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=256, n_positions=32))``,
random initialisation, on the bytes of examples/data/persuasion.txt cut into blocks of 32
(run_clm's ``group_texts``): 48 training blocks, 8 held out. Batch 4, 12 steps, evaluation
every 4 steps, ``logging_steps=1``, no checkpoints, ``report_to="none"``, CPU. It prints each
logged train loss as ``step N loss L`` and each evaluation as ``step N eval_loss L``, from
``trainer.state.log_history``.
"""

import json
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel, PrinterCallback, Trainer, TrainingArguments

TEXT = Path(__file__).resolve().parents[2] / "examples" / "data" / "persuasion.txt"
BLOCK, STEPS, BATCH, VOCAB = 32, 12, 4, 256


class Blocks(torch.utils.data.Dataset):
    def __init__(self, data):
        self.blocks = data.view(-1, BLOCK)

    def __len__(self):
        return len(self.blocks)

    def __getitem__(self, i):
        return {"input_ids": self.blocks[i], "labels": self.blocks[i]}


def main():
    torch.manual_seed(0)
    data = torch.tensor(list(TEXT.read_bytes()[: 56 * BLOCK]), dtype=torch.long)
    train, held_out = Blocks(data[: 48 * BLOCK]), Blocks(data[48 * BLOCK :])
    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=VOCAB, n_positions=BLOCK,
                        bos_token_id=0, eos_token_id=0)  # fmt: skip
    model = GPT2LMHeadModel(config)
    args = TrainingArguments(
        output_dir="hf_out", max_steps=STEPS, per_device_train_batch_size=BATCH,
        per_device_eval_batch_size=BATCH, learning_rate=2e-3, logging_steps=1,
        eval_strategy="steps", eval_steps=4, save_strategy="no", report_to="none",
        use_cpu=True, seed=0, dataloader_num_workers=0, disable_tqdm=True,
    )  # fmt: skip
    trainer = Trainer(model=model, args=args, train_dataset=train, eval_dataset=held_out)
    trainer.remove_callback(PrinterCallback)  # it prints runtimes: stdout must not vary
    trainer.train()
    history = trainer.state.log_history
    losses = [e["loss"] for e in history if "loss" in e]
    for e in history:
        for key in ("loss", "eval_loss"):
            if key in e:
                name = "loss" if key == "loss" else key
                print(f"step {e['step']} {name} {e[key]!r}", flush=True)
    # the counted 3rd step, one batch of B x T = 4 x 32 (d = 32, L = 2, V = 256): Conv1D and
    # tied head forward 2BT(12 L d^2 + d V), backward twice that; attention on CPU in training
    # (attn_pdrop 0.1: SDPA's math path, two bmm of 2 B T^2 d per layer) forward 4 L B T^2 d,
    # backward twice that: 6 x 128 x (24,576 + 8,192) + 12 x 2 x 4 x 1,024 x 32 = 28,311,552
    d, L = config.n_embd, config.n_layer
    flops = 6 * BATCH * BLOCK * (12 * L * d * d + d * VOCAB) + 12 * L * BATCH * BLOCK**2 * d
    counts = {
        "steps": trainer.state.global_step,
        "tokens": STEPS * BATCH * BLOCK,
        "samples": STEPS * BATCH,
        "seq_len": BLOCK,
        "losses": losses,
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
