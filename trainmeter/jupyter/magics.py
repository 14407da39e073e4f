"""``%%trainmeter`` (a training cell as a run segment) and ``%trainmeter`` (status, show, stop).

The cell body runs through IPython's own ``run_ast_nodes`` with the outer cell's result
object, so an exception is shown and recorded exactly as in a plain cell (same traceback, the
cell marked failed), and the last expression's value is displayed as usual.
"""

from __future__ import annotations

import sys
import threading
import time

from IPython.core.async_helpers import _pseudo_sync_runner
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

from trainmeter.core import flops
from trainmeter.core.options import run_options
from trainmeter.core.summary import summary_line
from trainmeter.core.units import flag_value, run_name

SYNC_TIMEOUT_S = 1.0  # a cell's end: the agent's records applied, from a healthy supervisor
SYNC_GRACE_S = 0.25  # ... beyond its own timeout, before the cell stops waiting on it
END_PING_TIMEOUT_S = 0.5  # ... missed: is the supervisor there at all?
BUSY_SYNC_TIMEOUT_S = 10.0  # ... it is, with a backlog to apply: wait for it this much more
END_TIMEOUT_S = 5.0  # segment_end (snapshot and full history) from a supervisor that answered


@magics_class
class TrainmeterMagics(Magics):
    """``%trainmeter`` and ``%%trainmeter``. ``loaded`` returns the extension's session (None
    after ``%unload_ext``) and ``show`` opens the widget of a run: both given by
    ``extension.load``, so that this module never imports the extension (one direction only)."""

    def __init__(self, shell, *, loaded, show) -> None:
        super().__init__(shell)
        self._loaded, self._show = loaded, show

    @magic_arguments()
    @argument("action", nargs="?", default=None,
              help="line magic only: status (default), show, stop")  # fmt: skip
    @argument("--name", help="run name (default: notebook)")
    @argument("--new", action="store_true", help="start a new run instead of continuing")
    @argument("--budget-tokens", help="token budget for progress and ETA, e.g. 20B")
    @argument("--budget-flops", help="training FLOPs budget for progress and ETA, e.g. 1e18")
    @argument("--convention", choices=flops.CONVENTIONS, help="FLOPs convention shown first")
    @argument("--peak", help="declared dense peak per device, e.g. 312T (FLOP/s)")
    @argument("--device", help='GPU for the peak: NVML name, row label or short name ("H100 '
              'SXM", h100-sxm, mi300x; tm peaks lists them)')  # fmt: skip
    @argument("--dtype", help="the run's dtype for the peak: bf16, fp16, tf32, fp8, fp32 "
              "(default: what the agent sees)")  # fmt: skip
    @argument("--no-widget", action="store_true", help="no live widget, summary line only")
    @line_cell_magic
    def trainmeter(self, line: str, cell: str | None = None):
        """Watch a training cell: ``%%trainmeter [--new] [--budget-tokens 20B] ...``."""
        args = parse_argstring(self.trainmeter, line)
        s = self._loaded()
        if s is None:  # %unload_ext: the user's choice, said before anything runs
            raise RuntimeError("trainmeter is not loaded: run %load_ext trainmeter first")
        if cell is None:
            return self._line(s, args)
        return self._cell(s, args, cell)

    # -- %%trainmeter ---------------------------------------------------------------------------
    def _cell(self, s, args, cell: str):
        """Run the body whatever state trainmeter is in: a bad flag is a UsageError before
        anything runs (the user's mistake); anything trainmeter cannot do is one line on stderr
        and the body runs, unwatched if the segment could not start."""
        opts = _opts(args)  # bad values raise UsageError-like ValueError before anything starts
        watched = self._begin(s, args, opts)
        bridge = _widget_bridge(s) if watched and not args.no_widget else None
        error = None
        try:
            error = self._execute(cell)
        finally:
            if watched:
                self._end_segment(s, bridge, error if error is not None else sys.exc_info()[1])

    def _begin(self, s, args, opts: dict) -> bool:
        """Heal the supervisor, start the segment and arm the agent; False (and one line on
        stderr) when the cell must run unwatched. Never raises."""
        try:
            note = s.check(cell=True)
            if note:
                _say(note)
            if s.unclosed is not None:  # the last cell's end went unanswered: close it now
                status, error = s.unclosed
                s.unclosed = None
                s.request("segment_end", status=status, error=error)
            info = s.request("segment_start", name=args.name or "notebook", opts=opts,
                             new=args.new)  # fmt: skip
        except Exception as exc:
            _say(f"[trainmeter] this cell runs unwatched: {_why(exc)}")
            return False
        try:
            if s.agent is not None:  # None only if the agent failed to start (it said so once)
                s.agent.arm(new_run=info.get("segment") == 1)
        except Exception as exc:  # the agent's own entry points never raise; this is a guard
            _say(f"[trainmeter] the agent could not start this cell: {_why(exc)}")
        return True

    def _execute(self, body: str) -> BaseException | None:
        """Run ``body`` like a plain cell; returns the exception it raised (already shown)."""
        shell = self.shell
        result = getattr(shell.displayhook, "exec_result", None)
        if result is None:  # not inside run_cell (a non-IPython host): plain exec, errors raise
            exec(shell.transform_cell(body), shell.user_ns)
            return None
        cell = shell.transform_cell(body)
        number = result.execution_count or shell.execution_count  # this cell's In[N]
        name = shell.compile.cache(cell, number, raw_code=body)
        try:
            tree = shell.transform_ast(shell.compile.ast_parse(cell, filename=name))
        except SyntaxError as exc:
            shell.showsyntaxerror(filename=name)
            result.error_in_exec = exc
            return exc
        coro = shell.run_ast_nodes(tree.body, name, interactivity="last_expr",
                                   compiler=shell.compile, result=result)  # fmt: skip
        return result.error_in_exec if _pseudo_sync_runner(coro) else None

    def _end_segment(self, s, bridge, error: BaseException | None) -> None:
        """Close the segment within a few seconds whatever the supervisor does; never raises
        (it must not hide the cell's own exception).

        The agent's sync (every record sent is applied) waits ``SYNC_TIMEOUT_S``; a supervisor
        that misses it gets one ping of ``END_PING_TIMEOUT_S``: if it answers it is only busy
        (a backlog to apply) and the sync waits up to ``BUSY_SYNC_TIMEOUT_S`` more; if not, the
        cell ends without a summary (one line) and the next cell heals. So a paused supervisor
        holds a cell's end about ``SYNC_TIMEOUT_S + END_PING_TIMEOUT_S`` seconds.
        """
        status = "ok"
        if isinstance(error, KeyboardInterrupt):
            status = "interrupted"
        elif error is not None:
            status = "error"
        text = f"{type(error).__name__}: {error}" if error is not None else None
        t0 = time.monotonic()
        agent = s.agent
        try:  # first: what the cell's end decides (a short loop's losses) is in the sync
            if agent is not None:
                agent.disarm()
        except Exception as exc:
            _say(f"[trainmeter] the agent did not stop cleanly: {_why(exc)}")
        synced = agent is None or _sync(agent, SYNC_TIMEOUT_S)
        answers = synced or s.answers(END_PING_TIMEOUT_S)
        if not synced and answers:
            _sync(agent, BUSY_SYNC_TIMEOUT_S)
        reply = None
        if answers:
            try:
                reply = s.request("segment_end", status=status, error=text,
                                  timeout=END_TIMEOUT_S)  # fmt: skip
            except Exception as exc:
                _say(f"[trainmeter] could not close the segment: {_why(exc)}; no summary for "
                     "this cell (the next %%trainmeter cell checks the supervisor)")  # fmt: skip
                s.unclosed = (status, text)
        else:
            s.unclosed = (status, text)
            took = time.monotonic() - t0
            if s.alive():
                what = (f"did not answer at the cell's end ({took:.1f} s); no summary for this "
                        "cell; the next %%trainmeter cell checks it again")  # fmt: skip
            else:
                what = ("stopped during this cell; no summary for this cell; the next "
                        "%%trainmeter cell starts a new one")  # fmt: skip
            _say(f"[trainmeter] the supervisor (pid {s.proc.pid}) {what}")
        try:
            if bridge is not None:
                if reply is not None:
                    bridge.stop(reply.get("snapshot"), reply.get("history"))
                else:
                    bridge.stop()
            if reply is not None:
                print(summary_line(reply["snapshot"]))
        except Exception as exc:
            _say(f"[trainmeter] could not show the summary: {_why(exc)}")

    # -- %trainmeter ----------------------------------------------------------------------------
    def _line(self, s, args):
        """``%trainmeter status|show|stop``: heals a stopped supervisor first (one line says
        so); what it cannot do is one line on stderr, never an exception."""
        action = args.action or "status"
        if action not in ("status", "show", "stop"):
            print(f"%trainmeter: unknown action {action!r}; use status, show or stop")
            return None
        try:
            note = s.check(cell=False)
        except Exception as exc:
            _say(f"[trainmeter] {_why(exc)}")
            return None
        if note:
            _say(note)
        try:
            if action == "status":
                print(summary_line(s.request("snapshot")["snapshot"]))
            elif action == "show":
                return self._show()
            else:
                snap = s.request("end_run", status="ok").get("snapshot")
                print(summary_line(snap) if snap else "trainmeter: no run is open")
        except Exception as exc:
            _say(f"[trainmeter] %trainmeter {action} failed: {_why(exc)}")
        return None


def _sync(agent, timeout: float) -> bool:
    """The agent's sync barrier (``Sender.sync``); False when it failed or took longer than
    ``timeout`` (+ ``SYNC_GRACE_S``). It runs in a helper thread that the cell waits on no
    longer: a sender blocked writing to a paused supervisor (its socket buffer full) holds its
    lock until the supervisor reads again or is stopped (the next cell's check stops it)."""
    done: list[bool] = []

    def run() -> None:
        try:
            done.append(bool(agent.sender.sync(timeout=timeout)))
        except Exception:
            done.append(False)

    try:
        helper = threading.Thread(target=run, name="trainmeter-sync", daemon=True)
        helper.start()
        helper.join(timeout + SYNC_GRACE_S)
    except Exception:
        return False
    return bool(done and done[0])


def _why(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "the supervisor did not answer in time"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _say(text: str) -> None:
    try:
        print(text, file=sys.stderr)
    except Exception:
        pass


def _widget_bridge(s):
    """Display a live widget fed by a bridge; a widget problem never stops the training cell."""
    try:
        from trainmeter.jupyter.bridge import Bridge
        from trainmeter.jupyter.widget import TrainmeterWidget

        widget = TrainmeterWidget()
        display(widget)
        return Bridge(s.socket, widget)
    except Exception as exc:
        print(f"[trainmeter] no live widget ({exc}); the cell runs and the summary still prints",
              file=sys.stderr)  # fmt: skip
        return None


def _opts(args) -> dict:
    """The cell's options (``core.options.run_options``, as ``tm`` reads its flags); a bad
    value is a UsageError naming the flag, before anything runs."""
    from IPython.core.error import UsageError

    try:
        if args.name is not None:
            flag_value("--name", run_name, args.name)  # checked as tm does (not an option)
        return run_options(budget_tokens=args.budget_tokens, budget_flops=args.budget_flops,
                           convention=args.convention, peak=args.peak,
                           device=_unquoted(args.device), dtype=args.dtype).record()  # fmt: skip
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _unquoted(name: str | None) -> str | None:
    """IPython's argument splitter keeps quotes (``--device "H100 SXM"`` gives
    ``'"H100 SXM"'``): one pair around the whole value is dropped, as a shell would."""
    if name and len(name) > 1 and name[0] == name[-1] and name[0] in "\"'":
        return name[1:-1]
    return name
