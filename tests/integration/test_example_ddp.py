"""The example GPT as a 4-rank ``torchrun`` job (gloo on CPU) under ``tm`` (many ranks).

Every rank's agent connects, rank 0 is the step clock, tokens count the world, and the printed
loss sequence (rank 0's mean over ranks) is the same to the last digit without ``tm``.
"""

import json
import sys

import pytest
from conftest import EXAMPLE, losses, read_log, run_plain, run_tm

pytestmark = pytest.mark.slow

STEPS, BATCH, SEQ = 6, 4, 32
# torchrun is `python -m torch.distributed.run`: the same launcher with and without tm
ARGS = ["-m", "torch.distributed.run", "--nproc_per_node=4", EXAMPLE, "--steps", str(STEPS),
        "--batch-size", str(BATCH), "--seq-len", str(SEQ), "--eval-every", "3"]  # fmt: skip


def test_four_ranks_connect_tokens_count_the_world_and_losses_are_unchanged(workdir):
    plain = run_plain(ARGS, workdir, timeout=600)
    watched = run_tm(["-q", "--", sys.executable, *ARGS], workdir, timeout=600)
    assert plain.returncode == 0, plain.stderr
    assert watched.returncode == 0, watched.stderr
    printed = losses(watched.stdout)
    assert len(printed) == STEPS + 2  # 6 train losses and 2 val losses, from rank 0 only
    assert printed == losses(plain.stdout)  # the same-numerics invariant, to the last digit
    log = read_log(workdir)
    hellos = {r["rank"] for r in log if r["k"] == "agent_hello" and r["world_size"] == 4}
    assert hellos == {0, 1, 2, 3}
    snap = json.loads(run_tm(["replay", "--json"], workdir).stdout)
    assert snap["step"] == STEPS and snap["ranks"] == {str(r): STEPS for r in range(4)}
    # by hand: 6 steps x (4 sequences x 32 bytes) x 4 ranks
    assert snap["tokens"] == STEPS * BATCH * SEQ * 4
    # the model inside DistributedDataParallel: its name and shape, as without torchrun
    # (examples/train_gpt.py GPTConfig: 4 layers, width 128, 4 heads, vocab 256, context SEQ)
    model = snap["model"]
    assert model["name"] == "GPT" and model["context"] == SEQ
    assert (model["layers"], model["width"], model["heads"], model["vocab"]) == (4, 128, 4, 256)
    train = [r["value"] for r in log if r["k"] == "series" and r["name"] == "train_loss"]
    assert [f"{v:.6f}" for v in train] == [ln.split()[-1] for ln in printed if " loss " in ln]
