"""The agent describes the model inside data-parallel and compiled wrappers (agent/describe.py)."""

import pytest

from trainmeter.agent.describe import unwrap

torch = pytest.importorskip("torch")


def test_wrappers_are_looked_through_and_a_plain_model_is_itself():
    model = torch.nn.Linear(2, 2)
    DistributedDataParallel = type("DistributedDataParallel", (torch.nn.Module,), {})
    OptimizedModule = type("OptimizedModule", (torch.nn.Module,), {})
    ddp, compiled = DistributedDataParallel(), OptimizedModule()
    compiled._orig_mod = model  # what torch.compile keeps
    ddp.module = compiled  # DDP(torch.compile(model))
    assert unwrap(ddp) is model and unwrap(compiled) is model
    assert unwrap(model) is model
    wrapped = torch.nn.DataParallel(model)  # the real class, on CPU
    assert unwrap(wrapped) is model
