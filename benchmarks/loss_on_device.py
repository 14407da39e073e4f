"""The loss from backward() on a GPU, with no synchronization: the child gpu_check.py runs
under ``tm`` (it needs CUDA; on a machine without one it exits 3).

    python benchmarks/loss_on_device.py [--steps 200]

A tiny MLP trains on CUDA with ``torch.cuda.set_sync_debug_mode("error")``: any call that
synchronizes the device raises, so an agent that read the loss with ``.item()`` (or any blocking
copy) inside the loop would fail (its guard turns the tap off and says so on stderr). The loop
itself never reads a value: it keeps each step's loss (detached, on the device) and, after the
loop and with the debug mode off, prints them all as one ``LOSSES [...]`` line, which
gpu_check.py compares with the run log's ``backward_loss`` series (numerics equal: the agent
copies the same float32 bits). The no-device-sync invariant: docs/architecture.md.
"""

from __future__ import annotations

import argparse
import json
import sys


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    args = p.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 3
    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 1))
    model.to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(args.steps, 32, 64, device=dev)
    y = torch.randn(args.steps, 32, 1, device=dev)
    kept = []
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # from here a synchronizing call raises
    for i in range(args.steps):
        loss = torch.nn.functional.mse_loss(model(x[i]), y[i])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        kept.append(loss.detach())
    torch.cuda.set_sync_debug_mode("default")
    values = torch.stack(kept).float().cpu().tolist()
    print("LOSSES " + json.dumps(values), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
