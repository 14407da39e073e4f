"""What each part of the agent's hot path costs inside a training step, side by side.

    python benchmarks/agent_parts.py [--rounds 250]

The same minimal loop as ``agent_overhead.py`` (one thread), with the agent's two hot-path
pieces swapped in alone, in a shuffled order each round: the root model's counting ``__call__``
(``torch_taps._counting_call``) and the clock optimizer's ``_optimizer_step_code``
(``step_clock._clocking_method``), each on and off (off: installed, but its check fails), and
for reference an exact copy of torch's own ``Module.__call__`` with an empty step method (what
the patching itself costs: nothing but noise). No sender thread runs: the queue is cleared after
each block. Prints the median paired difference per step against the plain loop in the same
round. docs/performance.md quotes the result.
"""

from __future__ import annotations

import argparse
import collections
import random
import statistics

from agent_overhead import _median_step as _block  # the same timed step as its sibling
from agent_overhead import stand_in_taps


def _variants(torch, model, opt) -> tuple[dict, collections.deque]:
    from trainmeter.agent.step_clock import _clocking_method
    from trainmeter.agent.torch_taps import _counting_call

    taps, queue = stand_in_taps(torch)

    def call(root_id):
        return _counting_call([root_id], queue.append, torch.is_grad_enabled, torch.Tensor,
                              [False], torch.compiler.is_compiling, True, None)  # fmt: skip

    own, profiler = torch.optim.Optimizer._optimizer_step_code, torch.autograd.profiler

    def step(opt_id):
        return _clocking_method(taps, [opt_id], own, profiler)

    def torchs_call(self, *args, **kwargs):  # torch's Module._wrapped_call_impl, repeated
        if self._compiled_call_impl is not None:
            return self._compiled_call_impl(*args, **kwargs)
        return self._call_impl(*args, **kwargs)

    return {
        "plain": (None, None),
        "plain again": (None, None),
        "torch's own, copied": (torchs_call, lambda self: None),
        "__call__ installed, off": (call(None), None),
        "step method installed, off": (None, step(None)),
        "counting __call__": (call(id(model)), None),
        "step method": (None, step(id(opt))),
        "both": (call(id(model)), step(id(opt))),
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
    mcls, ocls = type(model), type(opt)
    _block(model, opt, x, 300)
    times: dict[str, list[float]] = {name: [] for name in variants}
    rng = random.Random(0)
    for _ in range(args.rounds):
        order = list(variants.items())
        rng.shuffle(order)
        for name, (call, step) in order:
            if call is not None:
                mcls.__call__ = call
            if step is not None:
                ocls._optimizer_step_code = step
            _block(model, opt, x, 3)
            times[name].append(_block(model, opt, x, 100))
            queue.clear()
            for cls, attr in ((mcls, "__call__"), (ocls, "_optimizer_step_code")):
                if attr in cls.__dict__:
                    delattr(cls, attr)
    base = times["plain"]
    print(f"{args.rounds} rounds x 100 steps, 1 thread, no sender thread")
    for name, ts in times.items():
        added = statistics.median(b - a for a, b in zip(base, ts, strict=True))
        step = statistics.median(ts) * 1e6
        print(f"{name:28s} {step:8.2f} us a step   added {added * 1e6:6.2f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
