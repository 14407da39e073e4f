"""What each part of the agent's hot path costs inside a training step, side by side.

    python benchmarks/agent_parts.py [--rounds 250]

The same minimal loop as ``agent_overhead.py`` (one thread), with the agent's two hot-path
pieces swapped in alone, in a shuffled order each round: the root model's counting ``__call__``
(``torch_taps._counting_call``; also as it is once Dynamo has compiled in the process, when it
asks ``torch.compiler.is_compiling()``, and installed but off: its ``id`` check fails) and the
clock optimizer's own ``_optimizer_step_code`` (``step_clock.ticker``, the C chain), and for
reference an exact copy of torch's own ``Module.__call__`` (what the patching itself costs:
nothing but noise). No sender thread runs: the queue is cleared after each block. Prints the
median paired difference per step against the plain loop in the same round. docs/performance.md
quotes the result.
"""

from __future__ import annotations

import argparse
import collections
import random
import statistics

from agent_overhead import _median_step as _block  # the same timed step as its sibling


def _variants(torch, model, opt) -> tuple[dict, collections.deque]:
    from trainmeter.agent.step_clock import new_step_count, ticker
    from trainmeter.agent.torch_taps import _counting_call

    queue: collections.deque = collections.deque()

    def call(root_id, compiled=False):
        return _counting_call([root_id], queue.append, torch.is_grad_enabled, torch.Tensor,
                              [compiled], torch.compiler.is_compiling, True, None)  # fmt: skip

    step = ticker(queue.append, new_step_count())

    def torchs_call(self, *args, **kwargs):  # torch's Module._wrapped_call_impl, repeated
        if self._compiled_call_impl is not None:
            return self._compiled_call_impl(*args, **kwargs)
        return self._call_impl(*args, **kwargs)

    return {
        "plain": (None, None),
        "plain again": (None, None),
        "torch's own, copied": (torchs_call, None),
        "__call__ installed, off": (call(None), None),
        "counting __call__": (call(id(model)), None),
        "... appending nothing": (
            _counting_call(
                [id(model)], id, torch.is_grad_enabled, torch.Tensor, [False], None, True, None
            ),
            None,
        ),
        "... after a compile": (call(id(model), compiled=True), None),
        "step method": (None, step),
        "both": (call(id(model)), step),
    }, queue


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=250)
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(64, 16), torch.nn.Linear(16, 16))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randint(0, 64, (4, 8))
    variants, queue = _variants(torch, model, opt)
    mcls = type(model)
    _block(model, opt, x, 300)
    times: dict[str, list[float]] = {name: [] for name in variants}
    p10: dict[str, list[float]] = {name: [] for name in variants}
    rng = random.Random(0)
    for _ in range(args.rounds):
        order = list(variants.items())
        rng.shuffle(order)
        for name, (call, step) in order:
            if call is not None:
                mcls.__call__ = call
            if step is not None:
                opt._optimizer_step_code = step  # on the instance, as the step clock does
            _block(model, opt, x, 3)
            times[name].append(_block(model, opt, x, 100, p10=p10[name]))
            queue.clear()
            vars(opt).pop("_optimizer_step_code", None)
            if "__call__" in mcls.__dict__:
                del mcls.__call__
    print(f"{args.rounds} rounds x 100 steps, 1 thread, no sender thread")
    print(f"{'':28s} {'median step':>14s} {'added':>9s}   {'added at the 10th percentile':s}")
    for name, ts in times.items():
        added = statistics.median(b - a for a, b in zip(times["plain"], ts, strict=True))
        low = statistics.median(b - a for a, b in zip(p10["plain"], p10[name], strict=True))
        step = statistics.median(ts) * 1e6
        print(f"{name:28s} {step:11.2f} us {added * 1e6:6.2f} us   {low * 1e6:6.2f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
