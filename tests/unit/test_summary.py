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
