"""FSDP1 (flat parameters, ``use_orig_params`` False and True) and FSDP2 on two gloo ranks
(CPU, ``torch.multiprocessing.spawn`` as PyTorch's FSDP tutorial launches it): the agent's
model description counts the whole model, not the local shard (docs/spec.md "Counts from every
rank"). Each rank trains one step, then describes its wrapped model."""

import json
import os
import socket
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.slow

# the whole model by hand: embedding 64 x 32 = 2048; 2 blocks of Linear(32, 32) with bias,
# 2 x (1024 + 32) = 2112; LayerNorm(32) 64; head Linear(32, 64) without bias 2048
PARAMS = 2048 + 2112 + 64 + 2048  # 6272
EMBEDDING = 2048


def _model():
    nn = torch.nn

    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(64, 32)
            self.blocks = nn.ModuleList(nn.Linear(32, 32) for _ in range(2))
            self.norm = nn.LayerNorm(32)
            self.head = nn.Linear(32, 64, bias=False)

        def forward(self, ids):
            x = self.tok(ids)
            for b in self.blocks:
                x = x + b(x)
            return self.head(self.norm(x))

    return Tiny()


def _wrap(model, how, world):
    if how == "fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (world,))
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        return fully_shard(model, mesh=mesh)
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    policy = ModuleWrapPolicy({torch.nn.Linear})  # each block its own flat parameter
    return FSDP(
        model,
        auto_wrap_policy=policy,
        use_orig_params=how == "fsdp1-orig",
        device_id=torch.device("cpu"),
    )  # CPU FSDP1 needs it named (torch 2.13)


def _rank(rank, world, port, how, out):
    import torch.distributed as dist

    from trainmeter.agent.describe import describe

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = _wrap(_model(), how, world)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ids = torch.randint(0, 64, (2, 8))
    model(ids).float().mean().backward()
    opt.step()
    # what the rank holds: FSDP2's DTensor gives its global numel, its local shard its own
    local = sum((p.to_local() if hasattr(p, "to_local") else p).numel() for p in model.parameters())
    fields = describe(torch, model, 8)
    with open(f"{out}.{rank}", "w") as f:
        json.dump({"local": local, **fields}, f)
    dist.barrier()
    del model, opt
    dist.destroy_process_group()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("how", ["fsdp1", "fsdp1-orig", "fsdp2"])
def test_sharded_models_are_described_whole_on_every_rank(tmp_path, how):
    import torch.multiprocessing as mp

    out = str(tmp_path / "described")
    try:
        mp.spawn(_rank, args=(2, _free_port(), how, out), nprocs=2, join=True)
    except mp.ProcessExitedException as exc:  # torch's gloo exit abort (conftest.GLOO_EXIT_ABORT)
        # after every rank wrote what it found: what is checked here is whole, said as a warning
        if exc.signal_name != "SIGABRT" or not all(Path(f"{out}.{r}").exists() for r in range(2)):
            raise
        warnings.warn(f"gloo exit abort in rank {exc.error_index} at its exit", stacklevel=1)
    got = [json.loads(Path(f"{out}.{r}").read_text()) for r in range(2)]
    for d in got:
        assert d["params"] == PARAMS and d["embedding_params"] == EMBEDDING, d
        assert (d["layers"], d["width"], d["vocab"]) == (2, 32, 64)
    assert sum(d["local"] for d in got) < 2 * PARAMS  # sharded: each rank holds a part
    assert got[0]["local"] < PARAMS  # the local shard is not the whole model


@pytest.mark.parametrize("world", [2, 4])
def test_cpu_ddp_ranks_with_a_declared_peak_are_one_device_each(workdir, world):
    """tests/zoo/ddp_gloo.py under torchrun and ``tm --peak``: devices = the world size, the
    tokens are the ranks' own (the ZOO line's all-reduced sum), and MFU per device is the
    job's model FLOP/s / world / peak."""
    import sys

    from conftest import ROOT, run_tm

    zoo = ROOT / "tests" / "zoo" / "ddp_gloo.py"
    args = ["-q", "--peak", "1e12", "--", sys.executable, "-m", "torch.distributed.run",
            f"--nproc_per_node={world}", str(zoo)]  # fmt: skip
    done = run_tm(args, workdir, timeout=300)
    assert done.returncode == 0, done.stderr
    zoo_line = next(ln for ln in done.stdout.splitlines() if ln.startswith("ZOO "))
    counts = json.loads(zoo_line[4:])
    snap = json.loads(run_tm(["replay", "--json"], workdir).stdout)
    assert snap["gpus"] == world
    assert snap["tokens"] == counts["tokens"] == 64 * 16  # every sample once: 64 x 16 ids
    assert snap["rank_counts"]["rule"] == "sum" and snap["model"]["rule"] == "same"
    assert snap["model"]["params"] == counts["params"]
    # by hand: MFU = tokens/s x FLOPs/token / (world x 1e12), the per-device FLOP/s over peak
    c = "hf"  # 6 x non-embedding parameters: the tiny model has no heads for titan
    total = snap["tokens_per_s"] * snap["flops_per_token"][c]
    assert snap["model_flops_per_s"][c] == pytest.approx(total)
    assert snap["mfu"][c] == pytest.approx(total / world / 1e12)
