"""``tm ls``: one line a run, whatever a log holds; a run name's control characters are not
sent to the terminal; one run that cannot be listed is named and the others listed; a reader
that stops early (``tm ls | head``) ends the listing quietly."""

import os
import sys

from trainmeter.commands import ls
from trainmeter.supervisor.live import Live


def _runs(root, names):
    live = Live(root, clock=iter(range(1_700_000_000, 1_800_000_000, 10)).__next__)
    for name in names:
        live.open_run(name, ["train.py"], {})
        live.close_run("ok", 0)
    return root


def test_a_name_with_control_characters_is_printed_without_them(tmp_path, capsys):
    root = _runs(tmp_path / ".trainmeter", ["evil\x1b[2J\nname"])
    assert ls.main(["--dir", str(root)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and out.count("\n") == 1 and "evil?[2J?name" in out


def test_a_run_that_cannot_be_listed_is_named_and_the_others_listed(tmp_path, capsys, monkeypatch):
    root = _runs(tmp_path / ".trainmeter", ["a", "b", "c"])
    real = ls.ls_row

    def row(folder, now=None):
        if real(folder).split()[1] == "b":
            raise ValueError("a duration cannot be negative, got -1.0")
        return real(folder)

    monkeypatch.setattr(ls, "ls_row", row)
    assert ls.main(["--dir", str(root)]) == 1
    got = capsys.readouterr()
    assert [line.split()[1] for line in got.out.splitlines()] == ["a", "c"]
    assert "cannot be listed: ValueError: a duration cannot be negative" in got.err


def test_a_reader_that_stops_early_ends_the_listing_quietly(tmp_path, capsys, monkeypatch):
    root = _runs(tmp_path / ".trainmeter", ["a", "b", "c"])
    r, w = os.pipe()
    os.close(r)  # the reader is gone: every write raises BrokenPipeError
    saved = os.dup(1)
    try:
        with capsys.disabled(), os.fdopen(w, "w") as pipe:
            monkeypatch.setattr(sys, "stdout", pipe)
            assert ls.main(["--dir", str(root)]) == 0
            monkeypatch.undo()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    assert capsys.readouterr().err == ""
