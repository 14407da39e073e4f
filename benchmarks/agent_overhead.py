"""The agent's added cost per optimizer step, measured side by side in one run.

    python benchmarks/agent_overhead.py [--steps 2000] [--rounds 7]

A minimal training step (a 1-layer model on a (4, 8) token batch, SGD) is timed with and
without the agent's taps attached, alternating rounds so machine noise hits both alike; each
round reports the median step time. A real supervisor (in this process, on a private socket)
receives the records, so the sender's batching and JSON encoding run as in a real run (on
another thread). Also times the two hooks alone, called directly. Target (issue 2): under
5 microseconds added per step. Results go in docs/performance.md.
"""

from __future__ import annotations

import argparse
import statistics
import time

BLOCK = 100  # steps per alternating block


def _step_times(model, opt, x, steps: int) -> float:
    """Median seconds per step over ``steps`` steps (forward, backward, optimizer step)."""
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        loss = model(x).sum()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _hook_cost(fn, args, n: int = 200_000) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn(*args)
    return (time.perf_counter() - t0) / n


def _encode_cost(n: int = 1000, reps: int = 50) -> float:
    """Seconds per step to encode a flush of ``n`` steps as the sender does (one batch)."""
    from trainmeter.agent.sender import Sender

    class _Sink:
        def sendall(self, data):
            pass

    s = Sender.__new__(Sender)  # no thread, no socket: only the encoding path
    s.queue, s.rank, s._sock, s._hello = __import__("collections").deque(), 0, _Sink(), {}
    items = [(time.time() + i, i, 2048, 16) for i in range(n)]
    spent = 0.0
    for _ in range(reps):
        s.queue.extend(items)
        t0 = time.perf_counter()
        s._write_queued()
        spent += time.perf_counter() - t0
    return spent / (n * reps)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=2000, help="steps per round, each way")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)

    import tempfile

    import torch

    from trainmeter.agent import runtime
    from trainmeter.supervisor.ingest import Server, private_socket_path
    from trainmeter.supervisor.live import Live

    torch.set_num_threads(1)
    path = private_socket_path()
    live = Live(tempfile.mkdtemp(prefix="tm-bench-"))
    Server(path, live).serve_in_thread()
    live.open_run("bench", ["bench"], {})

    model = torch.nn.Sequential(torch.nn.Embedding(64, 16), torch.nn.Linear(16, 16))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randint(0, 64, (4, 8))
    agent = runtime.install(path)  # torch is imported: the taps attach now
    taps = agent.torch_taps
    _step_times(model, opt, x, 50)  # discovery happens at the first step: keep it out

    off, on = [], []
    for _ in range(args.rounds * args.steps // BLOCK):  # short alternating blocks cancel drift
        taps.detach()
        off.append(_step_times(model, opt, x, BLOCK))
        taps.attach()
        _step_times(model, opt, x, 2)  # re-discovery after attach: not a steady-state step
        on.append(_step_times(model, opt, x, BLOCK))
    agent.sender.sync()
    agent.sender._stop.set()  # the hooks alone, below, without the sender thread beside them
    base, watched = statistics.median(off), statistics.median(on)
    diffs = sorted(b - a for a, b in zip(off, on, strict=True))
    q1, q3 = diffs[len(diffs) // 4], diffs[3 * len(diffs) // 4]

    step_hook = _hook_cost(taps._on_step, (opt, (), {}))
    fwd_hook = _hook_cost(taps._on_forward, (model, (x,), {}))
    agent.sender.queue.clear()
    encode = _encode_cost()
    print(f"rounds {args.rounds} x {args.steps} steps, torch {torch.__version__}, 1 thread")
    print(f"step without agent  {base * 1e6:8.2f} us (median of round medians)")
    print(f"step with agent     {watched * 1e6:8.2f} us")
    print(f"added per step      {(watched - base) * 1e6:8.2f} us   ratio {watched / base:.4f}"
          f"   (paired blocks: median {statistics.median(diffs) * 1e6:.2f} us,"
          f" IQR {q1 * 1e6:.2f}..{q3 * 1e6:.2f} us)")  # fmt: skip
    hooks = f"optimizer hook alone {step_hook * 1e6:7.2f} us   forward hook alone"
    print(f"{hooks} {fwd_hook * 1e6:.2f} us")
    print(f"sender encode/step   {encode * 1e6:7.2f} us (on the sender thread, batched)")
    total = step_hook + fwd_hook + encode
    print(f"agent CPU per step   {total * 1e6:7.2f} us = hooks + encode (target < 5 us)")
    print(f"records received     {live.engine.records}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
