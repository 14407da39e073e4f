"""conftest's once_more_after_gloo_exit_abort: a run that died of torch's gloo exit abort
alone is run once more, with a warning; any other result, and a second abort, is kept."""

import subprocess

import pytest
from conftest import GLOO_EXIT_ABORT, once_more_after_gloo_exit_abort


def _runs(*results):
    """A run() that returns RESULTS ((returncode, stderr) pairs) in turn, and its call count."""
    calls = []

    def run():
        code, err = results[len(calls)]
        calls.append(code)
        return subprocess.CompletedProcess(["torchrun", "x.py"], code, "", err)

    return run, calls


def test_an_exit_abort_is_run_once_more_with_a_warning():
    run, calls = _runs((-6, f"step 6\n{GLOO_EXIT_ABORT}\n"), (0, ""))
    with pytest.warns(UserWarning, match="gloo exit abort in torchrun x.py"):
        done = once_more_after_gloo_exit_abort(run)
    assert (done.returncode, calls) == (0, [-6, 0])


def test_a_second_abort_is_returned_as_it_is():
    run, calls = _runs((1, GLOO_EXIT_ABORT), (1, GLOO_EXIT_ABORT), (0, ""))
    with pytest.warns(UserWarning):
        done = once_more_after_gloo_exit_abort(run)
    assert (done.returncode, calls) == (1, [1, 1])


@pytest.mark.parametrize(
    "result",
    [(0, GLOO_EXIT_ABORT), (1, "Traceback: RuntimeError: deliberate failure"), (0, "")],
)
def test_anything_else_runs_once(result):
    run, calls = _runs(result, (0, ""))
    done = once_more_after_gloo_exit_abort(run)
    assert (done.returncode, len(calls)) == (result[0], 1)
