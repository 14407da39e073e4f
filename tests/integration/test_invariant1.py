"""The never-raise invariant by construction: nothing the torch taps install ever raises into
training.

A loop in the style of real code adds and removes its own hooks around trainmeter's (global and
per-optimizer step hooks that remove themselves from inside torch's hook loop, where torch
allows it; module hooks added and removed mid-run; ``.eval()`` before the first step and inside
an optimizer hook; a no-grad evaluation inside a hook), with the user's hooks registered before
or after the taps attach. Each of trainmeter's hooks and patched entry points is then made to
raise, one at a time: training must give the same losses to the last bit as without
trainmeter, with one warning, and leave none of trainmeter's hooks in torch after detach.
Before the hook door (agent/hooks.py), the plain case raised ``RuntimeError: OrderedDict
mutated during iteration`` at the first ``optimizer.step()``.
"""

import pytest
from conftest import StandInAgent

torch = pytest.importorskip("torch")

from torch.nn.modules import module as torch_module  # noqa: E402
from torch.optim import optimizer as torch_optim  # noqa: E402

from trainmeter.agent import backward, flop_count, spans, step_clock, torch_taps  # noqa: E402

pytestmark = pytest.mark.slow
STEPS = 8

# every callback trainmeter hands torch through its hook door, and the patched entry points
# (the class and method that a fault replaces); test_every_hook_of_the_door_is_in_the_list
# fails when a new hook is added without a line here
FAULTS = {
    "clock hook": (step_clock.StepClock, "_on_step"),
    "clock method": (step_clock.StepClock, "_refresh"),
    "discovery pre-hook": (torch_taps.TorchTaps, "_g_pre"),
    "discovery hook": (torch_taps.TorchTaps, "_g_post"),
    "closure-step hook": (torch_taps.TorchTaps, "_closure_step"),
    "first step": (torch_taps.TorchTaps, "first_step"),
    "second step": (torch_taps.TorchTaps, "second_step"),
    "losses decided": (torch_taps.TorchTaps, "losses_decided"),
    "warm-up hook": (spans.Spans, "_warm_forward"),
    "eval begin and end": (spans.Spans, "_train_called"),
    "eval hook": (spans.Spans, "_eval_forward"),
    "counted-FLOPs pre-hook": (flop_count.FlopCount, "_on_forward"),
    "counted-FLOPs forward hook": (flop_count.FlopCount, "_after_forward"),
    "counted-FLOPs step hook": (flop_count.FlopCount, "_before_step"),
    "counted-FLOPs closure-step hook": (flop_count.FlopCount, "_after_step"),
    "backward tap": (backward, "_now"),  # the time stamp inside the backward() wrapper
    "batch axes": (torch_taps.BatchAxes, "see"),
}
HOOK_FUNCS = {  # the door's hook functions, by their names as methods
    "_on_step", "_g_pre", "_g_post", "_closure_step", "_warm_forward", "_eval_forward",
    "_on_forward", "_after_forward", "_before_step", "_after_step",
}  # fmt: skip


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(30, 8)
        self.bn = torch.nn.BatchNorm1d(8)
        self.out = torch.nn.Linear(8, 30)

    def forward(self, idx):
        h = self.emb(idx)  # (B, T, 8)
        h = self.bn(h.transpose(1, 2)).transpose(1, 2)
        return self.out(h)


def _user_hooks(model, opt, log):
    """The loop's own hooks: each removes itself or is removed by the loop later."""
    handles = {}

    def global_post(optimizer, args, kwargs):  # removes itself at step 2: allowed by torch
        log.append("gpost")  # while it is the last entry of the global dict
        if len(log) >= 2:
            handles["gpost"].remove()

    def instance_post(optimizer, args, kwargs):  # the last of the instance's own dict
        log.append("ipost")
        if log.count("ipost") == 3:
            handles["ipost"].remove()

    def evaluate_in_hook(optimizer, args, kwargs):  # evaluates from inside the hook loop
        if log.count("ipost") == 2 and "eval" not in log:
            log.append("eval")
            model.eval()
            with torch.no_grad():
                model(torch.zeros(2, 4, dtype=torch.long))
            model.train()

    handles["gpost"] = torch_optim.register_optimizer_step_post_hook(global_post)
    handles["eval"] = opt.register_step_post_hook(evaluate_in_hook)
    handles["ipost"] = opt.register_step_post_hook(instance_post)
    handles["gpre"] = torch_module.register_module_forward_pre_hook(lambda m, a: None)
    return handles


def _train(taps_factory=None, order="user_first", closure=False):
    """The loop (``closure``: stepped as ``opt.step(closure)``, as Lightning steps); returns
    its losses (and the taps, detached)."""
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    model, log, taps = _Net(), [], None
    model.bn.eval()  # frozen batch norm, before the first step (crashed under the old taps)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    handles = _user_hooks(model, opt, log) if order == "user_first" else {}
    if taps_factory is not None:
        taps = taps_factory()
    if order == "user_last":
        handles = _user_hooks(model, opt, log)
    losses, fwd = [], None
    for step in range(1, STEPS + 1):
        if step == 3:
            fwd = model.out.register_forward_hook(lambda m, a, o: None)
        if step == 4:
            handles["gpre"].remove()
        if step == 6:
            fwd.remove()
        x = torch.randint(0, 30, (2, 4), generator=gen)

        def forward_backward(x=x):
            loss = torch.nn.functional.cross_entropy(model(x).reshape(-1, 30), x.reshape(-1))
            loss.backward()
            return loss

        loss = opt.step(forward_backward) if closure else forward_backward()
        if not closure:
            opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    for h in handles.values():
        h.remove()
    if taps is not None:
        taps.detach()
    return losses, taps


def _ours_left_in_torch() -> list:
    dicts = (
        torch_optim._global_optimizer_pre_hooks,
        torch_optim._global_optimizer_post_hooks,
        torch_module._global_forward_pre_hooks,
        torch_module._global_forward_hooks,
    )
    return [h for d in dicts for h in d.values() if hasattr(h, "hook")]


def _attach():
    taps = torch_taps.TorchTaps(StandInAgent(), torch)
    taps.attach()
    return taps


@pytest.mark.parametrize("order", ["user_first", "user_last"])
def test_user_hooks_around_trainmeters_train_exactly_as_without_it(fresh_guard, capsys, order):
    plain, _ = _train(order=order)
    watched, taps = _train(_attach, order)
    assert watched == plain
    assert "[trainmeter]" not in capsys.readouterr().err
    assert _ours_left_in_torch() == []
    steps, _ = taps.agent.sender.counts()
    assert [s[0] for s in steps] == list(range(1, STEPS + 1))  # and the clock clocked them


# each fault in a loop that steps plainly and in one that steps with a closure, except the
# count's step hooks: the plain step's ends the count at the step, the closure step's after it
ONLY = {"counted-FLOPs step hook": (False,), "counted-FLOPs closure-step hook": (True,)}
CASES = [(f, c) for f in sorted(FAULTS) for c in ONLY.get(f, (False, True))]


@pytest.mark.parametrize("order", ["user_first", "user_last"])
@pytest.mark.parametrize(("fault", "closure"), CASES)
def test_a_fault_in_any_hook_warns_once_and_trains_exactly_as_without_it(
    fresh_guard, capsys, monkeypatch, fault, order, closure
):
    cls, name = FAULTS[fault]

    def boom(*args, **kwargs):
        raise RuntimeError(f"forced failure in {fault} (test)")

    monkeypatch.setattr(cls, name, boom)
    plain, _ = _train(order=order, closure=closure)
    watched, _ = _train(_attach, order, closure)
    assert watched == plain
    warnings = [ln for ln in capsys.readouterr().err.splitlines() if "[trainmeter]" in ln]
    assert len(warnings) == 1 and "forced failure" in warnings[0], warnings
    assert _ours_left_in_torch() == []


def test_every_hook_of_the_door_is_in_the_list(fresh_guard):
    """The fault list covers every function the door hands torch in this loop."""
    _, taps = _train(_attach)
    installed = taps.door.funcs
    assert installed <= HOOK_FUNCS, installed - HOOK_FUNCS
    faulted = {name for _, name in FAULTS.values()}
    assert not HOOK_FUNCS - faulted, HOOK_FUNCS - faulted
