"""The one agent of a training process: its sender, step counter and taps.

``install()`` is called by the injected ``sitecustomize`` (under ``tm``) or by ``%load_ext``
(in a notebook kernel). It connects lazily to the supervisor's socket, says hello, and waits
for the user's code to import torch (or a tracker: wandb, TensorBoard, MLflow) before
attaching its tap.
"""

from __future__ import annotations

import os
import time

from trainmeter.agent import guard
from trainmeter.agent.step_clock import new_step_count, steps_taken
from trainmeter.core.envnames import NO_TAP, PAD_TOKENS, SOCKET

# Imported by every `import trainmeter` (emit lives here): the socket, JSON and import-hook
# machinery load only when an agent is installed, so a plain script pays ~nothing.

_agent: Agent | None = None


class Agent:
    """State shared by the taps and ``emit()``.

    Args:
        socket_path: the supervisor's Unix socket.
        armed: whether records are sent now (a kernel agent is armed only inside
            ``%%trainmeter`` cells; a ``tm`` child always).
    """

    def __init__(self, socket_path: str, armed: bool = True) -> None:
        import socket
        import sys

        from trainmeter.agent.sender import Sender

        self.rank = _env_int("RANK", 0)
        self.world_size = _env_int("WORLD_SIZE", 1)
        self.armed = armed
        self.pad_skip = os.environ.get(PAD_TOKENS) == "skip"  # tm --pad-tokens skip
        self.steps = new_step_count()  # the clock optimizer's steps, in this process
        self.torch_taps = None
        self.tracker_taps = None  # created when the user's code imports a tracker
        self.framework_taps = None  # ... or the HF Trainer or Lightning (agent/frameworks.py)
        hello = {
            "ctl": "agent", "pid": os.getpid(), "rank": self.rank, "world_size": self.world_size,
            "local_rank": _env_int("LOCAL_RANK", 0), "host": socket.gethostname(),
            "python": sys.version.split()[0],
        }  # fmt: skip
        self.sender = Sender(socket_path, hello)
        self._hello = {k: v for k, v in hello.items() if k != "ctl"}
        self.put("agent_hello", **self._hello)

    @property
    def step(self) -> int:
        """Optimizer steps of the clock optimizer so far (agent/step_clock.py counts them); in
        a loop that steps no optimizer, clocked by its backward() calls, those calls."""
        n = steps_taken(self.steps)
        taps = self.torch_taps
        if n == 0 and taps is not None and self.sender.reader.ledger.clock == "backward":
            return taps.backward.calls
        return n

    def adopt_rank(self, rank: int, world_size: int) -> None:
        """The process's rank as ``torch.distributed`` has it (``mp.spawn`` and hand-launched
        jobs pass it to ``init_process_group``, not in ``RANK``): from now on every record and
        batch carries it, and a new ``agent_hello`` says so."""
        self.rank, self.world_size = rank, world_size
        self.sender.set_rank(rank, world_size)
        if rank != 0:
            self.sender.reader.ledger.state = "off"  # only rank 0 records the loss
        self._hello.update(rank=rank, world_size=world_size)
        self.put("agent_hello", **self._hello)

    def train_loss_reported(self) -> None:
        """A tracker, a framework or emit() just reported a train loss (agent/backward.py)."""
        taps = self.torch_taps
        if taps is not None:
            taps.train_loss_reported()

    def put(self, kind: str, **fields: object) -> None:
        """Queue one record stamped now (dropped while disarmed)."""
        if self.armed:
            self.sender.put({"v": 1, "k": kind, "t": time.time(), **fields})

    def put_model(self, fields: dict[str, object]) -> None:
        self.put("model", rank=self.rank, **fields)

    def arm(self, new_run: bool = False) -> None:
        """Start sending (a %%trainmeter cell began); a new run restarts the step count."""
        self.armed = True
        if new_run:
            self.steps = new_step_count()
        self.put("agent_hello", **self._hello)
        taps = self.torch_taps
        if taps is not None:
            if taps.off and self.sender.alive:
                # quieted when the sender stopped (a notebook supervisor died or paused) and
                # paused at the last cell's end; the sender is back (retarget): count again
                taps.off = False
            taps.rediscover() if new_run else taps.new_segment()

    def disarm(self) -> None:
        if self.torch_taps is not None:
            self.torch_taps.finish()  # the cell's end: what waited for more steps is decided
        self.armed = False
        if self.torch_taps is not None:
            self.torch_taps.pause()

    def attach_torch(self, torch) -> None:
        from trainmeter.agent.torch_taps import TorchTaps

        taps = TorchTaps(self, torch)
        taps.attach()
        self.torch_taps = taps

    def attach_tracker(self, module) -> None:
        """Wrap the logging calls of wandb, TensorBoard or MLflow, just imported by the user."""
        if self.tracker_taps is None:
            from trainmeter.agent.trackers import TrackerTaps

            self.tracker_taps = TrackerTaps(self)
        self.tracker_taps.attach(module)

    def attach_framework(self, module) -> None:
        """Wrap the logging call of the HF Trainer or Lightning, just imported by the user."""
        if self.framework_taps is None:
            from trainmeter.agent.frameworks import FrameworkTaps

            self.framework_taps = FrameworkTaps(self)
        self.framework_taps.attach(module)

    def close(self) -> None:
        from trainmeter.agent.frameworks import MODULES as FRAMEWORKS
        from trainmeter.agent.importhook import cancel
        from trainmeter.agent.trackers import MODULES

        cancel("torch", self.attach_torch)
        for name in MODULES:
            cancel(name, self.attach_tracker)
        for name in FRAMEWORKS:
            cancel(name, self.attach_framework)
        if self.framework_taps is not None:
            self.framework_taps.detach()
        if self.torch_taps is not None:
            self.torch_taps.detach()
        if self.tracker_taps is not None:
            self.tracker_taps.detach()
        self.sender.close()


def install(socket_path: str, armed: bool = True, taps: bool = True) -> Agent | None:
    """Create the process's agent once; later calls return the same one. Never raises."""
    global _agent
    if _agent is not None:
        return _agent
    try:
        import atexit

        from trainmeter.agent.importhook import when_imported

        _agent = Agent(socket_path, armed=armed)
        if taps:  # --no-tap: neither torch, tracker nor framework taps, emit() only
            from trainmeter.agent.frameworks import MODULES as FRAMEWORKS
            from trainmeter.agent.trackers import MODULES

            when_imported("torch", _agent.attach_torch)
            for name in MODULES:
                when_imported(name, _agent.attach_tracker)
            for name in FRAMEWORKS:  # the HF Trainer and Lightning
                when_imported(name, _agent.attach_framework)
        atexit.register(_at_exit)
        os.register_at_fork(after_in_child=_after_fork)
    except Exception as exc:
        guard.failed("agent", exc)
        _agent = None
    return _agent


def install_from_env() -> Agent | None:
    """``install`` from ``TRAINMETER_SOCKET`` (set by ``tm`` for its child); None if unset."""
    path = os.environ.get(SOCKET)
    if not path:
        return None
    return install(path, taps=os.environ.get(NO_TAP) != "1")


def current() -> Agent | None:
    """The process's agent, or None when trainmeter is not watching this process."""
    return _agent


def uninstall() -> None:
    """Stop sending and detach every tap (``%unload_ext``)."""
    global _agent
    if _agent is not None:
        try:
            _agent.close()
        except Exception as exc:
            guard.failed("agent shutdown", exc)
        _agent = None


def _at_exit() -> None:
    try:
        if _agent is not None:
            if _agent.torch_taps is not None and _agent.armed:
                _agent.torch_taps.finish()  # a short loop clocked by backward() (backward.py)
            _agent.sender.close()
    except Exception:
        pass


def _after_fork() -> None:
    """A forked child (a DataLoader worker) must never write to the parent's connection."""
    global _agent
    if _agent is not None:
        _agent.armed = False
        _agent.sender.forget_after_fork()
        _agent = None


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default
