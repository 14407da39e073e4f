"""Two real gloo ranks on CPU under ``tm -- torchrun`` that are not one data-parallel replica
(docs/spec.md "Counts from every rank"), run by ``tests/fixtures/uneven_ranks_train.py``:

- local SGD (DiLoCo's inner loop): each rank steps its own optimizer a different number of
  times with a different batch, no all-reduce: the job's tokens are the sum of the ranks' own;
- a two-stage pipeline: rank 0 holds the embedding and blocks 0-1, rank 1 blocks 2-3 and the
  head: the model shown is the stages' sum, by the rule ``stages``.

Every figure is pinned to a hand count from the constants below and the fixture's shapes."""

import json
import sys

import pytest
from conftest import FIXTURES, run_tm

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

SCRIPT = FIXTURES / "uneven_ranks_train.py"
SEQ, WIDTH, VOCAB = 16, 32, 64  # the fixture's SEQ, WIDTH, VOCAB


def _run(workdir, *args) -> tuple[dict, str]:
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc_per_node=2", str(SCRIPT), *args]  # fmt: skip
    done = run_tm(["-q", "--", *torchrun], workdir, timeout=300)
    assert done.returncode == 0, done.stderr
    snap = json.loads(run_tm(["replay", "--json"], workdir).stdout)
    return snap, done.stdout


def test_uncoupled_ranks_with_different_steps_and_batches_count_their_own_tokens(workdir):
    steps, batch = (6, 3), (4, 2)  # rank 0: 6 steps of 4 sequences; rank 1: 3 steps of 2
    snap, out = _run(workdir, "--mode", "local", "--steps", "6,3", "--batch", "4,2")
    # by hand: rank 0 6 x 4 x 16 = 384 tokens, rank 1 3 x 2 x 16 = 96; 480 in all (the old
    # rank 0 x world rule: 768)
    own = [steps[r] * batch[r] * SEQ for r in (0, 1)]
    assert own == [384, 96]
    assert f"RANK 0 steps 6 tokens {own[0]} samples 24" in out  # what the ranks counted
    assert f"RANK 1 steps 3 tokens {own[1]} samples 6" in out
    assert snap["tokens"] == sum(own) == 480
    assert snap["samples"] == 6 * 4 + 3 * 2
    assert snap["rank_tokens"] == {"0": 384, "1": 96}
    assert snap["ranks"] == {"0": 6, "1": 3} and snap["step"] == 6  # rank 0 is the clock
    assert snap["rank_counts"]["rule"] == "sum" and snap["rank_counts"]["estimated_ranks"] == 0
    assert snap["model"]["rule"] == "same" and snap["model"]["ranks"] == 2


def test_pipeline_stages_on_two_ranks_are_shown_as_the_stages_sum(workdir):
    snap, out = _run(workdir, "--mode", "stages", "--steps", "3", "--batch", "2")
    # by hand: Linear(32, 32) with bias 32 x 32 + 32 = 1056; FirstStage: embedding 64 x 32 =
    # 2048 + 2 blocks = 4160; LastStage: 2 blocks + head 32 x 64 (no bias) = 2048: 4160. The
    # job's model: 8320 parameters (the unsplit TinyLM's), 2048 of them embeddings, 4 layers
    block = WIDTH * WIDTH + WIDTH
    first, last = VOCAB * WIDTH + 2 * block, 2 * block + WIDTH * VOCAB
    assert (first, last) == (4160, 4160)
    m = snap["model"]
    assert m["rule"] == "stages" and (m["stages"], m["replicas"], m["ranks"]) == (2, 1, 2)
    assert m["rule_text"] == (
        "model: 2 different models over 2 ranks, taken as 2 pipeline stages x 1 data-parallel "
        "replica(s): parameters and layers are the stages' sum, FLOPs per token the whole "
        "pipeline's"
    )
    assert m["name"] == "FirstStage+LastStage"
    assert m["params"] == first + last == 8320
    assert m["embedding_params"] == VOCAB * WIDTH and m["layers"] == 2 + 2
    # hf: 6 x non-embedding parameters of the whole pipeline, 6 x (8320 - 2048)
    assert snap["flops_per_token"]["hf"] == 6 * (8320 - 2048) == 37_632
    # token ids go in at the first stage only: 3 steps x 2 sequences x 16; samples on both
    assert "RANK 0 steps 3 tokens 96 samples 6" in out and "RANK 1 steps 3 tokens 0" in out
    assert snap["rank_tokens"] == {"0": 3 * 2 * SEQ, "1": 0} and snap["tokens"] == 96
    assert snap["samples"] == 2 * 3 * 2
