"""The agent's added cost per optimizer step, measured side by side in one run.

    python benchmarks/agent_overhead.py [--blocks 400]

One process runs a minimal training loop (a 1-layer model on a (4, 8) token batch, SGD, one
thread) in alternating blocks of 100 steps: taps detached, then attached, again and again, so
the machine's noise (large on a shared 2-core VM: whole runs differ by 30 %) hits both alike.
The agent is the real one, sending every record to a real supervisor in its own process (the
notebook supervisor, ``python -m trainmeter.supervisor``). Each block reports its median step
time; the added cost is the median of the paired block differences, with a bootstrap 90 %
interval. It also times the agent's pieces alone (the step clock's method called directly,
the root's counting ``__call__`` A/B on calls, and the sender thread's count and encoding per
step) and, for reference, a no-op module forward pre-hook, which is why the agent uses none.
Target (issue 2): under 5 microseconds added per step. Results go in docs/performance.md.
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

WARMUP = 300
BLOCK = 100  # steps per alternating block


def _setup():
    """The measured loop's model, optimizer and batch (one thread, seeded)."""
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(64, 16), torch.nn.Linear(16, 16))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    return torch, model, opt, torch.randint(0, 64, (4, 8))


def _median_step(model, opt, x, n: int, cpu: list | None = None) -> float:
    """Median wall seconds of ``n`` training steps; appends the block's process CPU seconds
    per step (all threads: the sender's too) to ``cpu`` when given."""
    times = []
    c0 = time.process_time()
    for _ in range(n):
        t0 = time.perf_counter()
        model(x).sum().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
    if cpu is not None:
        cpu.append((time.process_time() - c0) / n)
    return statistics.median(times)


def _supervisor(tmp: str):
    """A real supervisor process with an open run; returns (process, socket path)."""
    from trainmeter.supervisor import client
    from trainmeter.supervisor.ingest import private_socket_path

    path = private_socket_path()
    cmd = [sys.executable, "-m", "trainmeter.supervisor", "--socket", path,
           "--parent", str(os.getpid()), "--dir", tmp]  # fmt: skip
    proc = subprocess.Popen(cmd)
    for _ in range(200):
        try:
            client.request(path, "segment_start", name="bench", opts={}, new=True)
            return proc, path
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("supervisor did not start")


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _paired(blocks: int, tmp: str) -> tuple[list[float], list[float], float, tuple]:
    from trainmeter.agent import runtime

    _, model, opt, x = _setup()
    _median_step(model, opt, x, WARMUP)
    proc, path = _supervisor(tmp)
    agent = runtime.install(path)  # torch is imported: the taps attach now
    taps = agent.torch_taps

    off, on, cpu_off, cpu_on = [], [], [], []
    for _ in range(blocks):
        taps.detach()
        off.append(_median_step(model, opt, x, BLOCK, cpu_off))
        taps.attach()
        # re-discovery after attach, and the counted-FLOPs step (flop_count.COUNT_STEP) that
        # every attach arms again: not steady-state steps
        _median_step(model, opt, x, 4)
        on.append(_median_step(model, opt, x, BLOCK, cpu_on))
    agent.sender.sync()
    supervisor_cpu = _cpu_seconds(proc.pid) / (blocks * (BLOCK + 2))  # per step it received
    runtime.uninstall()
    proc.terminate()
    proc.wait()
    return off, on, supervisor_cpu, (cpu_off, cpu_on)


def _interval(diffs: list[float], reps: int = 2000) -> tuple[float, float]:
    """Bootstrap 90 % interval of the median of ``diffs``."""
    rng = random.Random(0)
    meds = sorted(statistics.median(rng.choices(diffs, k=len(diffs))) for _ in range(reps))
    return meds[int(0.05 * reps)], meds[int(0.95 * reps)]


def stand_in_taps(torch):
    """Real torch taps on a stand-in agent whose sender is a bounded deque and no thread:
    ``(taps, queue)``."""
    from trainmeter.agent.torch_taps import TorchTaps

    queue: collections.deque = collections.deque(maxlen=1000)

    class _Sender:
        put_step, max_items = queue.append, 0

        def set_counter(self, *how):
            pass

    class _Agent:
        armed, step, rank, sender = True, 0, 0, _Sender()

        def put_model(self, fields):
            pass

    return TorchTaps(_Agent(), torch), queue


def _pieces() -> dict:
    """The agent's own code, timed alone (no sender thread running beside it)."""
    from trainmeter.agent.sender import QueueReader, _line
    from trainmeter.agent.step_clock import _clocking_method

    torch, model, opt, x = _setup()
    taps, queue = stand_in_taps(torch)
    no_profiler = type("P", (), {"_is_profiler_enabled": False})
    method = _clocking_method(taps, [id(opt)], lambda self: None, no_profiler)
    n = 100_000
    t0 = time.perf_counter()
    for _ in range(n):
        method(opt)
    step_hook = (time.perf_counter() - t0) / n

    def forwards(k=3000):
        t0 = time.perf_counter()
        for _ in range(k):
            model(x)
        return (time.perf_counter() - t0) / k

    call, hook = [], []  # paired A/B on forward calls alone (grad enabled: tokens queued)
    for _ in range(40):
        a = forwards()
        taps._patch_call(model)
        call.append(forwards() - a)
        taps._unpatch()
        queue.clear()
        h = model.register_forward_pre_hook(lambda *a, **k: None, with_kwargs=True)
        hook.append(forwards() - a)
        h.remove()

    reader = QueueReader(0)  # the sender thread's work: count each call, encode the batch
    reader.tensor, reader.ints = torch.Tensor, (torch.int64, torch.int32)
    items = [y for i in range(1000) for y in (x, time.time() + i)]  # as the clock queues them
    spent = 0.0
    for _ in range(50):
        q = collections.deque(items)
        t0 = time.perf_counter()
        steps, _, _ = reader.read(q)
        _line(steps)
        spent += time.perf_counter() - t0
    encode = spent / 50_000

    return {"step_hook": step_hook, "call": statistics.median(call), "encode": encode,
            "noop_module_hook": statistics.median(hook)}  # fmt: skip


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--blocks", type=int, default=400, help="block pairs (100 steps each)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tm-bench-") as tmp:
        off, on, supervisor_cpu, (cpu_off, cpu_on) = _paired(args.blocks, tmp)
    us = 1e6
    diffs = [b - a for a, b in zip(off, on, strict=True)]
    lo, hi = _interval(diffs)
    base, added = statistics.median(off), statistics.median(diffs)
    print(f"{args.blocks} block pairs x {BLOCK} steps, 1 thread, a real supervisor process")
    print(
        f"step without agent {base * us:8.2f} us   with agent {statistics.median(on) * us:8.2f} us"
    )
    print(
        f"added per step     {added * us:8.2f} us   (90% interval {lo * us:.2f}..{hi * us:.2f})"
        f"   ratio {(base + added) / base:.4f}   target < 5 us"
    )
    cdiffs = [b - a for a, b in zip(cpu_off, cpu_on, strict=True)]
    clo, chi = _interval(cdiffs)
    print(
        f"CPU time per step  {statistics.median(cpu_off) * us:8.2f} us   added "
        f"{statistics.median(cdiffs) * us:.2f} us (90% interval {clo * us:.2f}..{chi * us:.2f}; "
        "process CPU, all threads: blind to time the machine gave to others)"
    )
    print(f"supervisor process {supervisor_cpu * us:8.2f} us of CPU per step (outside the run)")
    pc = _pieces()
    own = pc["step_hook"] + pc["call"] + pc["encode"]
    print(f"agent code alone   step clock method {pc['step_hook'] * us:.2f} us (direct calls)")
    print(f"                   counting __call__ {pc['call'] * us:.2f} us (A/B on calls)")
    enc = pc["encode"] * us
    print(f"                   sender count + encoding {enc:.2f} us per step (its thread)")
    print(f"                   sum {own * us:.2f} us")
    hook = pc["noop_module_hook"] * us
    print(
        f"for reference      a no-op module forward pre-hook adds {hook:.2f} us per forward"
        " (A/B on calls; why the agent uses none)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
