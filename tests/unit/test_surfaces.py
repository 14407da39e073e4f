"""One truth per fact on every surface: the page and the widget (the JS the panels draw with), the
passport (``tm passport``) and the summary line show each figure, or the core's reason for its
absence, in the same words.

Eight real snapshots, each built by applying the records a run of that kind writes to an
``Engine`` (the fake GPUs' through the real sampler over the scripted NVML): a finished run, a
running one, one ``tm attach`` watched, a notebook run whose kernel is alive (two cells, no
``run_end``), a CPU run on fake GPUs (a demonstration), an image model (no tokens), a run that
finished after one step against a token budget (no timed step), and one that failed before its
first step on a GPU the sampler never read (no model, no loss, no reading). This test renders
each through the CLI (``tm passport``'s Markdown, the summary line), checks what the CLI says
against the snapshot's ``reasons`` and against itself, and writes the golden file
``js/tests/golden/surfaces.json`` that js/tests/surfaces.test.js reads: the snapshot and the
CLI's rows, which it compares with the panels' text (js/derive.js and the panels' exported
functions, and the whole dashboard drawn into a stand-in DOM). Run
``python tests/unit/test_surfaces.py --write`` after a change of words, then ``npm test``.
"""

import json
import re
import sys
import threading
from pathlib import Path

import pytest

from trainmeter.core import passport, passport_md, records
from trainmeter.core.engine import Engine
from trainmeter.core.reasons import labelled, split, tagged
from trainmeter.core.summary import summary_line

GOLDEN = Path(__file__).resolve().parents[2] / "js" / "tests" / "golden" / "surfaces.json"
T0 = 1_700_000_000.0

# a token model with no block stack (an embedding, an MLP, a head): hf has a figure, the
# conventions that need layers and heads do not (what the agent describes for such a model)
TOKMLP = {"name": "TokMLP", "params": 66112, "embedding_params": 16384,
          "token_embedding_params": 16384, "layers": None, "width": 64, "heads": None,
          "kv_heads": None, "head_dim": None, "vocab": 256, "seq_len": 64, "context": None,
          "tied_embeddings": False, "ffn": 256, "gated_mlp": False, "batch_axis": 0,
          "device": "cpu", "dtype": "float32", "run_dtype": "fp32", "torch": "2.13.0+cpu",
          "gpus": 0}  # fmt: skip
GPT = {**TOKMLP, "name": "GPT", "params": 824_064, "embedding_params": 49_152,
       "token_embedding_params": 32_768, "layers": 4, "width": 128, "heads": 4, "seq_len": 128,
       "context": 128, "ffn": 512}  # fmt: skip
IMAGES = {**{k: None for k in TOKMLP}, "name": "Sequential", "params": 15914,
          "embedding_params": 0, "token_embedding_params": 0, "tied_embeddings": False,
          "gated_mlp": False, "batch_axis": 0, "device": "cpu", "dtype": "float32",
          "run_dtype": "fp32", "gpus": 0}  # fmt: skip
NO_NVML = "no NVML: libnvidia-ml.so.1 not found (no NVIDIA driver on this machine)"


def _start(eng, t, opts=None, name="run"):
    eng.apply(records.make("run_start", t, id=f"20231114-{name}", name=name, argv=["train.py"],
                           version="0", cwd="/w", host="h", opts=opts or {}))  # fmt: skip


def _train(eng, t, model, steps, dt=0.2, tokens=512, samples=8, counted=True, hello=True):
    """A training loop's records from ``t``: the agent's hello, 2 s of imports and model build,
    the first batch's data wait, the warm-up span (first forward to first step), the model
    record and the step clock at the first step, then ``steps`` steps of ``dt`` s, each with a
    data wait, and the counted step at the 3rd. Returns the time of the last step."""
    if hello:
        eng.apply(records.make("agent_hello", t + 0.1, pid=4242, rank=0, world_size=1, host="h"))
    eng.apply(records.make("span", t + 2.0, name="data", dur=0.1, rank=0))
    eng.apply(records.make("span", t + 2.1, name="warmup", dur=0.4, rank=0))
    for n in range(1, steps + 1):
        at = t + 2.5 + (n - 1) * dt
        if n == 1:
            eng.apply(records.make("model", at, **model, rank=0))
            eng.apply(records.make("step_clock", at, source="optimizer", rank=0))
        eng.apply(records.make("step", at, step=n, rank=0, tokens=tokens or None,
                               samples=samples, seq_sq=tokens * model["seq_len"] if tokens
                               else None))  # fmt: skip
        if n > 1:
            eng.apply(records.make("span", at - dt + 0.01, name="data", dur=0.02, rank=0))
        eng.apply(records.make("series", at, name="backward_loss", value=3.0 - 0.01 * n,
                               step=n, role="train_loss", source="backward"))  # fmt: skip
        if counted and n == 3:
            flops = 6 * 49_728 * tokens if tokens else 6 * 15914 * samples
            eng.apply(records.make("flops_counted", at, step=3, rank=0, flops=float(flops),
                                   tokens=tokens or None, samples=samples, attention="none counted",
                                   mapped=[], not_counted=[], ops={}))  # fmt: skip
    return t + 2.5 + (steps - 1) * dt


def _no_gpus(eng, t):
    """The sampler on a machine without NVML: no GPUs, the host only."""
    eng.apply(records.make("gpu_devices", t, backend="none", devices=[], reason=NO_NVML))
    eng.apply(
        records.make(
            "gpu",
            t,
            gpus=[],
            host={
                "time_s": t,
                "cpu_util": 0.5,
                "mem_used_bytes": 2**30,
                "mem_total_bytes": 2**34,
                "missing": {},
            },
        )
    )


def _finished():
    eng = Engine()
    _start(eng, T0, name="finished")
    _no_gpus(eng, T0 + 0.01)
    end = _train(eng, T0, TOKMLP, 30)
    eng.apply(records.make("run_end", end + 1.0, status="ok", exit_code=0))
    return eng, None


def _running():
    """One step in, a token budget declared: no throughput, MFU or ETA yet."""
    eng = Engine()
    _start(eng, T0, {"budget_tokens": 10**9}, name="running")
    _no_gpus(eng, T0 + 0.01)
    end = _train(eng, T0, GPT, 1)
    return eng, end + 0.5


def _attached():
    """``tm attach`` over a process on two real GPUs: no agent, so no model, steps or FLOPs."""
    eng = Engine()
    _start(eng, T0, {"attached": 4242}, name="attached")
    device = {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-x", "mem_total_bytes": 80 * 2**30,
              "power_limit_w": 700.0, "gpm": True, "gpm_reason": None, "mig": False,
              "gpu_instance_id": None, "lost": None, "missing": {}}  # fmt: skip
    eng.apply(
        records.make(
            "gpu_devices",
            T0,
            backend="nvml",
            reason=None,
            devices=[{**device, "index": i, "gpu_index": i} for i in (0, 1)],
        )
    )
    for k in range(1, 6):
        gpus = [{"index": i, "gpu_util": 0.9, "sm_active": 0.7, "tensor_active": 0.4,
                 "energy_mj": 1000 * 600 * k, "power_w": 600.0,
                 "process_mem_bytes": {"4242": 2**33}} for i in (0, 1)]  # fmt: skip
        facts = {"pid": 4242, "pids": [4242], "alive": True, "cmdline": "python train.py"}
        eng.apply(records.make("gpu", T0 + k, gpus=gpus, host=None,
                               **({"process": facts} if k == 1 else {})))  # fmt: skip
    eng.apply(records.make("run_end", T0 + 6.0, status="ok", exit_code=None))
    return eng, None


def _notebook():
    """Two ``%%trainmeter`` cells of one run, the kernel alive: no ``run_end``."""
    eng = Engine()
    eng.apply(records.make("run_start", T0, id="20231114-notebook", name="notebook",
                           argv=["%%trainmeter"], version="0", cwd="/w", host="h",
                           opts={}))  # fmt: skip
    eng.apply(records.make("segment_start", T0, segment=1, opts={}))
    _no_gpus(eng, T0 + 0.01)
    end = _train(eng, T0, TOKMLP, 10)
    eng.apply(records.make("segment_end", end + 0.2, segment=1, status="ok"))
    t2 = end + 60.0
    eng.apply(records.make("segment_start", t2, segment=2, opts={}))
    for n in range(11, 21):
        eng.apply(records.make("step", t2 + 0.5 + (n - 11) * 0.2, step=n, rank=0, tokens=512,
                               samples=8, seq_sq=512 * 64))  # fmt: skip
    eng.apply(records.make("segment_end", t2 + 3.0, segment=2, status="ok"))
    return eng, None


class _Into:
    """Stands in for the supervisor's ``Live``: the sampler's records go into an engine."""

    def __init__(self, eng):
        self.eng, self.run_id, self.cond = eng, "r", threading.Condition()

    def ingest(self, recs):
        for rec in recs:
            self.eng.apply(rec)
        return True


def _fake_gpus():
    """A CPU run on ``--gpu-backend fake:h100x2`` declaring ``--dtype bf16`` (the peak's): the
    real NVML backend over the scripted fake, read by the real sampler, every 0.5 s."""
    from trainmeter.sources import open_backend
    from trainmeter.supervisor.sampler import Sampler

    now = [T0]
    eng = Engine()
    _start(eng, T0, {"dtype": "bf16"}, name="fake")
    sampler = Sampler(_Into(eng), open_backend("fake:h100x2", clock=lambda: now[0]), None,
                      clock=lambda: now[0])  # fmt: skip
    end = _train(eng, T0, GPT, 30)
    while now[0] <= end:
        sampler.tick()
        now[0] += 0.5
    eng.apply(records.make("run_end", end + 0.5, status="ok", exit_code=0))
    return eng, None


def _images():
    """An image model: samples, no token ids."""
    eng = Engine()
    _start(eng, T0, name="images")
    _no_gpus(eng, T0 + 0.01)
    end = _train(eng, T0, IMAGES, 20, tokens=0, samples=16)
    eng.apply(records.make("run_end", end + 1.0, status="ok", exit_code=0))
    return eng, None


def _one_step():
    """Finished after one step against a token budget: nothing was timed, and nothing will be."""
    eng = Engine()
    _start(eng, T0, {"budget_tokens": 10**6}, name="one_step")
    _no_gpus(eng, T0 + 0.01)
    end = _train(eng, T0, GPT, 1)
    eng.apply(records.make("run_end", end + 1.0, status="ok", exit_code=0))
    return eng, None


def _crashed():
    """Failed before its first step on a machine with one GPU the sampler listed and never
    read: no model, no step, no loss, no GPU or host reading, no dtype."""
    eng = Engine()
    _start(eng, T0, name="crashed")
    device = {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-y", "mem_total_bytes": 80 * 2**30,
              "power_limit_w": 700.0, "gpm": True, "gpm_reason": None, "mig": False,
              "gpu_instance_id": None, "lost": None, "missing": {}, "index": 0,
              "gpu_index": 0}  # fmt: skip
    eng.apply(records.make("gpu_devices", T0 + 0.01, backend="nvml", reason=None,
                           devices=[device]))  # fmt: skip
    eng.apply(records.make("agent_hello", T0 + 0.1, pid=4242, rank=0, world_size=1, host="h"))
    eng.apply(records.make("run_end", T0 + 3.0, status="error", exit_code=1))
    return eng, None


CASES = {"finished": _finished, "running": _running, "attached": _attached,
         "notebook": _notebook, "fake_gpus": _fake_gpus, "images": _images,
         "one_step": _one_step, "crashed": _crashed}  # fmt: skip


def _rows(md: str) -> dict[str, str]:
    """The passport's table as {figure: value} (the Markdown's escapes undone)."""
    out = {}
    for line in md.splitlines():
        m = re.match(r"^\| (.+?) \| (.*) \|$", line)
        if m and m.group(1) not in ("figure", "---"):
            out[m.group(1)] = m.group(2).replace("\\|", "|")
    return out


def by_convention(row: str) -> dict[str, str]:
    """A passport row of every convention, as {convention: what it says}: "4.58 GFLOP" for a
    figure, the core's reason ("n/a: titan needs ...") for a missing one, from the Markdown's
    "4.58 GFLOP [hf] · n/a [titan, megatron] (titan needs ...) · ..." (js/tests/surfaces.test.js
    reads it the same way)."""
    out = {}
    for part in row.split(" · "):
        m = re.match(r"^(.*?) \[([a-z, ]+)\](?: \((.*)\))?$", part)
        if m:
            head, convs, why = m.groups()
            for c in convs.split(", "):
                out[c] = f"{head}: {why}" if why else head
    return out


def render(name: str) -> dict:
    """One case through the CLI: its snapshot, the passport's rows and the summary line."""
    eng, now = CASES[name]()
    snap = eng.snapshot(now)
    md = passport_md.markdown(passport.build(snap, version="0"))
    return {"name": name, "snapshot": snap, "passport": _rows(md), "summary": summary_line(snap)}


def golden() -> dict:
    return {"cases": [render(name) for name in CASES]}


@pytest.fixture(scope="module")
def cases():
    return {c["name"]: c for c in golden()["cases"]}


def _finished_runs(cases):
    return [c for c in cases.values() if c["snapshot"]["run"].get("ended") is not None]


def test_the_cases_are_the_runs_they_say():
    g = {c["name"]: c["snapshot"] for c in golden()["cases"]}
    assert g["finished"]["run"]["state"] == "finished" and g["finished"]["run"]["ended"]
    assert g["running"]["run"]["state"] == "running" and g["running"]["tokens_per_s"] is None
    assert g["attached"]["process"]["pid"] == 4242 and g["attached"]["model"] is None
    assert g["notebook"]["run"]["segment"] == 2 and "ended" not in g["notebook"]["run"]
    assert g["fake_gpus"]["hardware"]["backend"] == "fake:h100x2"
    assert len(g["fake_gpus"]["hardware"]["gpus"]) == 2 and g["fake_gpus"]["peak"]
    assert g["images"]["tokens"] == 0 and g["images"]["samples"] == 320
    assert g["one_step"]["run"]["ended"] and g["one_step"]["step"] == 1
    assert g["one_step"]["tokens_per_s"] is None and g["one_step"]["budget_tokens"] == 10**6
    assert g["crashed"]["run"]["state"] == "failed" and g["crashed"]["model"] is None
    assert g["crashed"]["hardware"]["gpus"][0]["gpu_util"] is None


def _strings(x):
    """Every string inside ``x`` (dict keys and values, list items), depth first."""
    if isinstance(x, str):
        yield x
    elif isinstance(x, dict):
        for k, v in x.items():
            yield str(k)
            yield from _strings(v)
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from _strings(v)


def test_a_finished_run_never_says_yet_on_any_surface(cases):
    """Nothing more will come to a run that has ended: no string of any surface says "yet":
    the snapshot the page and the widget draw (its reasons, notes, the sampler's and the
    counters' reasons, every other string), the passport's JSON and all of its Markdown, and the
    summary line. The page's own words: js/tests/surfaces.test.js."""
    done = _finished_runs(cases)
    assert {c["name"] for c in done} == {"finished", "attached", "fake_gpus", "images",
                                         "one_step", "crashed"}  # fmt: skip
    for c in done:
        p = passport.build(c["snapshot"], version="0")
        said = [*_strings(c["snapshot"]), *_strings(p), *passport_md.markdown(p).splitlines(),
                c["summary"]]  # fmt: skip
        yet = [s for s in said if re.search(r"\byet\b", s)]
        assert not yet, (c["name"], yet)


def test_an_open_run_may_say_yet_and_its_reasons_say_so(cases):
    """The same figures of a run that is still open say "yet": the rule is the run's end, not
    the figure (the running case: one step, nothing timed so far)."""
    why = cases["running"]["snapshot"]["reasons"]
    for key in ("tokens_per_s", "step_time_s", "samples_per_s", "ended"):
        assert re.search(r"\byet\b", why[key]), key


def test_each_missing_figure_is_said_in_the_cores_words_in_the_passport_and_summary(cases):
    rows_of = {"flops_per_token": "FLOPs per token", "flops_spent": "FLOPs spent",
               "mfu_avg": "MFU"}  # fmt: skip
    single = {"model": "model", "dtype": "dtype", "gpu_hours": "GPU-hours", "energy_j": "energy",
              "peak": "peak", "ended": "ended", "time_split": "where the time goes"}  # fmt: skip
    for c in cases.values():
        snap, rows, why = c["snapshot"], c["passport"], c["snapshot"]["reasons"]
        conv = snap["convention"]
        for key, row in rows_of.items():
            said = by_convention(rows[row])
            if snap[key] is None:  # no figure under any convention: the shown one says why
                assert said[conv] == why[f"{key}/{conv}"], (c["name"], key)
            for c_, value in (snap[key] or {}).items():  # every convention: its figure or why
                reason = why.get(f"{key}/{c_}")
                assert (value is None) == (reason is not None), (c["name"], key, c_)
                if reason is not None:  # "n/a [titan] (titan needs ...)": the core's words
                    assert said[c_] == reason, (c["name"], key, c_)
        for key, row in single.items():
            if key in why:
                assert rows[row] == why[key], (c["name"], key)
        fpt = snap["flops_per_token"].get(conv)
        if fpt is None and snap["tokens"]:  # the summary says it as the passport does
            assert tagged(why[f"flops_per_token/{conv}"], conv) in c["summary"], c["name"]


def test_the_summary_and_the_passport_say_the_same_of_flops_per_token(cases):
    """The run's convention's FLOPs per token: the same figure, or the same reason, in the
    summary line and the passport."""
    for c in cases.values():
        if not c["snapshot"]["tokens"]:
            continue  # no tokens: the summary gives samples instead
        conv = c["snapshot"]["convention"]
        part = next(p for p in c["summary"].split(" · ")
                    if f"[{conv}]" in p and not p.startswith("MFU "))  # fmt: skip
        assert by_convention(part)[conv] == by_convention(c["passport"]["FLOPs per token"])[conv]


def test_no_passport_says_a_run_finished_where_it_says_the_run_has_no_end(cases):
    for c in cases.values():
        state = next(v for k, v in c["passport"].items() if k.endswith("state"))
        ended = c["passport"]["ended"]
        if not re.match(r"^\d{4}-\d\d-\d\dT", ended):  # no end date: the run is open
            assert state == "running" or "the run is open" in state, (c["name"], state, ended)


def test_a_fake_gpu_is_never_named_as_the_device_a_run_trained_on(cases):
    for c in cases.values():
        hw = c["snapshot"]["hardware"] or {}
        if str(hw.get("backend")).startswith("fake"):
            device = c["passport"]["hardware"].split(" · ")[0]
            assert not any(g["name"] in device for g in hw["gpus"]), (c["name"], device)


def test_state_and_end_agree_for_a_notebook_run_whose_kernel_is_alive(cases):
    c = cases["notebook"]
    # not "finished" beside "ended: unknown": the cell finished, the run is open
    assert c["passport"]["state"] == "finished (cell 2; the run is open)"
    assert c["summary"].startswith("trainmeter: finished (cell 2; the run is open) · ")
    assert c["passport"]["ended"].startswith("not yet: the run is open between notebook cells")
    assert split(c["snapshot"]["reasons"]["eta_s"])[1].startswith("no budget declared")


def test_a_demonstration_names_its_fake_gpus_and_the_run_keeps_its_own_device_and_dtype(cases):
    c = cases["fake_gpus"]
    snap, rows = c["snapshot"], c["passport"]
    assert snap["device_text"] == "cpu"  # the run's own, not "2 × NVIDIA H100 80GB HBM3"
    assert snap["demonstration"]["text"] == "demonstration: 2 × fake H100"
    assert "demonstration, not a measurement" in snap["demonstration"]["banner"]
    assert rows["hardware"] == ("cpu · demonstration: 2 × fake H100, not a measurement · "
                                "counters: fake:h100x2")  # fmt: skip
    assert rows["dtype"] == "fp32 (the peak is read for bf16: --dtype)"  # the agent's own first
    assert "demonstration: 2 × fake H100" in c["summary"]
    for other in ("finished", "running", "attached", "notebook", "images"):
        assert cases[other]["snapshot"]["demonstration"] is None, other


def test_start_up_is_its_own_bucket_and_the_buckets_add_up_to_the_elapsed_time(cases):
    c = cases["finished"]
    split_ = c["snapshot"]["time_split"]
    # 2 s of imports and model build, then the first data wait (0.1 s) and the warm-up (0.4 s)
    assert split_["startup"] == pytest.approx(2.0)
    buckets = ("compute", "data", "checkpoint", "eval", "startup", "other")
    for case in cases.values():
        s = case["snapshot"]
        if s["time_split"] is not None:
            assert sum(s["time_split"][b] for b in buckets) == pytest.approx(s["elapsed_s"])
    assert "start-up " in c["passport"]["where the time goes"]


def test_the_summary_says_why_throughput_is_missing_as_the_passport_does(cases):
    """No "n/a" for a missing tokens/s: the core's reason in its short form ("tokens/s: not
    measured (...)", once for samples/s too when it is the same), the passport's throughput row
    the same reason."""
    checked = 0
    for c in cases.values():
        snap, why = c["snapshot"], c["snapshot"]["reasons"]
        if snap["tokens_missing"] or snap["process"] or snap["tokens_per_s_avg"] is not None:
            continue
        reason = why["tokens_per_s_avg"]
        same = why.get("samples_per_s_avg") == reason
        label = "tokens/s and samples/s" if same else "tokens/s"
        assert labelled(label, reason) in c["summary"].split(" · "), (c["name"], c["summary"])
        assert " n/a" not in f" {c['summary']}", c["summary"]
        assert c["passport"]["throughput"].startswith(reason), c["name"]
        checked += 1
    assert checked == 3  # running, one_step, crashed


def test_a_run_whose_gpu_was_never_read_says_so_in_the_past(cases):
    """The counters' and the sampler's fallbacks know the run has ended: "not sampled", "the
    run's dtype was never seen"; the GPU's chart, the loss chart, the series table and the plan
    have the core's reason."""
    snap = cases["crashed"]["snapshot"]
    gpu, host = snap["hardware"]["gpus"][0], snap["hardware"]["host"]
    assert gpu["missing"]["gpu_util"] == gpu["missing"]["power_w"] == "not sampled"
    assert gpu["missing"]["intensity"] == "the run's dtype was never seen (no peak to compare with)"
    assert set(host["missing"].values()) == {"not sampled"}
    why = snap["reasons"]
    assert why["gpu_activity"].startswith("not measured: the sampler read none of GPU 0's")
    assert why["loss"].startswith("not measured: the run reported no training or validation loss")
    assert why["series"].startswith("not measured: the run reported no series")
    assert why["plan"].startswith("no plan: a plan needs a dense peak, and ")
    # no model: said by the figures' reasons, not again in a note of other words (the "no
    # MFU" note is MFU's reason, word for word)
    said = set(snap["reasons"].values())
    assert not [n for n in snap["notes"] if "model" in n and n not in said], snap["notes"]
    # the same run, still open: "yet" (the sampler may still read it)
    eng, _ = _crashed()
    eng.run.pop("ended")
    eng.run["state"] = "running"
    open_ = eng.snapshot()
    assert open_["hardware"]["gpus"][0]["missing"]["gpu_util"] == "not sampled yet"
    assert open_["reasons"]["gpu_activity"].startswith("not measured yet: no reading of GPU 0's")


def test_no_surface_says_no_device_was_seen_where_the_header_names_one(cases):
    """A run that names a device (``device_text``, the header's and the passport's device
    line) never says elsewhere that no device was seen: the crashed run's sampler listed an
    H100 and no model said the run trained on it, which its peak, MFU, plan and GPU-hours
    reasons say (the passport and the summary line take them)."""
    for c in cases.values():
        snap = c["snapshot"]
        if not snap.get("device_text"):
            continue
        p = passport.build(snap, version="0")
        said = [*_strings(snap), *_strings(p), *passport_md.markdown(p).splitlines(),
                c["summary"]]  # fmt: skip
        wrong = [s for s in said if re.search(r"no device (was )?seen|no known device", s)]
        assert not wrong, (c["name"], snap["device_text"], wrong)
    crashed = cases["crashed"]["snapshot"]
    assert crashed["device_text"] == "NVIDIA H100 80GB HBM3"
    listed = ("the GPU sampler listed NVIDIA H100 80GB HBM3, but no model was seen to say the run "
              "trained on it")  # fmt: skip
    why = crashed["reasons"]
    assert why["peak"] == f"no peak: no dense peak is known ({listed}); declare one with --peak"
    assert why["mfu/titan"] == f"no MFU: no dense peak is known ({listed}); declare one with --peak"
    assert why["gpu_hours"] == (f"no GPUs: the run's device is not known ({listed}), and with "
                                "no peak declared it counts no GPUs")  # fmt: skip


def test_the_golden_file_is_what_the_cli_gives_now():
    assert GOLDEN.exists(), "write it: python tests/unit/test_surfaces.py --write"
    assert json.loads(GOLDEN.read_text()) == json.loads(json.dumps(golden())), (
        "a surface changed: python tests/unit/test_surfaces.py --write, then npm test"
    )


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    GOLDEN.write_text(json.dumps(golden(), separators=(",", ":"), ensure_ascii=False) + "\n")
    print(f"wrote {GOLDEN}")
