"""The summary line's MFU figure (trainmeter/core/summary.py); values computed by hand."""

from trainmeter.core.summary import summary_line


def _snap(mfu: float) -> dict:
    return {"run": {"state": "finished"}, "convention": "titan", "step": 3, "tokens": 30,
            "flops_per_token": {"titan": 6e9}, "mfu_avg": {"titan": mfu}}  # fmt: skip


def test_mfu_has_one_decimal_and_names_its_convention():
    assert "MFU 41.2% [titan]" in summary_line(_snap(0.412))  # 0.412 x 100 = 41.2


def test_a_tiny_nonzero_mfu_never_reads_as_zero():
    # 3.2e-5 x 100 = 0.0032 %: one decimal would print "0.0%"
    assert "MFU 0.0032% [titan]" in summary_line(_snap(3.2e-5))
    assert "MFU 0.0% [titan]" in summary_line(_snap(0.0))  # a real zero stays a zero


def test_an_attached_run_says_what_is_unknown_rather_than_zero_steps():
    snap = {"run": {"state": "finished", "log": "x/run.jsonl"}, "step": 0, "tokens": 0,
            "elapsed_s": 5.6, "process": {"pid": 4242}, "model": None}  # fmt: skip
    line = summary_line(snap)
    assert line == ("trainmeter: finished · watched process 4242 from outside (no agent: no "
                    "steps, tokens or FLOPs) · 5.6 s · log x/run.jsonl")  # fmt: skip


def test_the_drop_text_names_three_reasons_and_says_one_record_in_the_singular():
    from trainmeter.core.drops import drop_text

    # by hand: 1 + 2 + 3 + 1228 = 1234, the fourth reason past the limit of three
    by = {"a (agent)": 1, "b (agent)": 2, "c (supervisor)": 3, "d (disk)": 1228}
    assert drop_text({"total": 1234, "by": by}) == (
        "1,234 records dropped (1 a (agent), 2 b (agent), 3 c (supervisor), 1 more)"
    )
    assert drop_text({"total": 1, "by": {"line too long (supervisor)": 1}}) == (
        "1 record dropped (1 line too long (supervisor))"
    )
    assert drop_text({"total": 0, "by": {}}) is None and drop_text(None) is None


def test_a_run_without_tokens_gives_samples_first_the_reason_and_hfu_counted():
    why = ("the model's inputs are not token ids (an image or feature batch), so no tokens, "
           "tokens/s or FLOPs per token apply")  # fmt: skip
    snap = {"run": {"state": "finished"}, "convention": "titan", "step": 30, "tokens": 0,
            "samples": 480, "samples_per_s_avg": 3279.2, "samples_per_step": 16.0,
            "tokens_missing": why, "flops_per_sample_counted": 2_715_648.0,
            "flops_per_token": {"titan": None}, "mfu_avg": None,
            "hfu_counted": {"avg": 0.0089}, "elapsed_s": 12.1}  # fmt: skip
    assert summary_line(snap) == (
        f"trainmeter: finished · 30 steps · 480 samples · 3.28 k samples/s (16/step) · no "
        f"tokens: {why} · 2.72 MFLOP/sample [counted] · HFU 0.9% [counted] · 12.1 s"
    )  # 0.0089 x 100 = 0.89 -> "0.9%"; 2,715,648 -> 2.72 M


def test_a_token_run_gives_samples_per_s_and_hfu_counted_beside_mfu():
    snap = {**_snap(0.412), "tokens_per_s_avg": 1200.0, "samples_per_s_avg": 2.5,
            "samples_per_step": 12.5, "hfu_counted": {"avg": 0.5}}  # fmt: skip
    line = summary_line(snap)
    assert " · 1.20 k tokens/s · 2.50 samples/s (12.5/step) · 6.00 GFLOP/token [titan] · " in line
    assert line.endswith("MFU 41.2% [titan] · HFU 50.0% [counted] · n/a")  # no elapsed time
