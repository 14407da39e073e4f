"""``%%trainmeter`` (a training cell as a run segment) and ``%trainmeter`` (status, show, stop).

The cell body runs through IPython's own ``run_ast_nodes`` with the outer cell's result
object, so an exception is shown and recorded exactly as in a plain cell (same traceback, the
cell marked failed), and the last expression's value is displayed as usual.
"""

from __future__ import annotations

import sys

from IPython.core.async_helpers import _pseudo_sync_runner
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

from trainmeter.core import flops, peaks
from trainmeter.core.summary import summary_line
from trainmeter.core.units import parse_count, parse_flops, parse_flops_budget


@magics_class
class TrainmeterMagics(Magics):
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
        from trainmeter.jupyter.extension import session

        args = parse_argstring(self.trainmeter, line)
        s = session()
        if cell is None:
            return self._line(s, args)
        return self._cell(s, args, cell)

    # -- %%trainmeter ---------------------------------------------------------------------------
    def _cell(self, s, args, cell: str):
        opts = _opts(args)  # bad values raise UsageError-like ValueError before anything starts
        info = s.request("segment_start", name=args.name or "notebook", opts=opts, new=args.new)
        if s.agent is not None:  # None only if the agent failed to start (it said so once)
            s.agent.arm(new_run=info["segment"] == 1)
        bridge = None if args.no_widget else _widget_bridge(s)
        error = None
        try:
            error = self._execute(cell)
        finally:
            self._end_segment(s, bridge, error if error is not None else sys.exc_info()[1])

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
        """Close the segment; never raises (it must not hide the cell's own exception)."""
        status = "ok"
        if isinstance(error, KeyboardInterrupt):
            status = "interrupted"
        elif error is not None:
            status = "error"
        try:
            if s.agent is not None:
                s.agent.sender.sync()
                s.agent.disarm()
            text = f"{type(error).__name__}: {error}" if error is not None else None
            reply = s.request("segment_end", status=status, error=text)
            if bridge is not None:
                bridge.stop(reply["snapshot"], reply.get("history"))
            print(summary_line(reply["snapshot"]))
        except Exception as exc:
            print(f"[trainmeter] could not close the segment: {exc!r}", file=sys.stderr)

    # -- %trainmeter ----------------------------------------------------------------------------
    def _line(self, s, args):
        action = args.action or "status"
        if action == "status":
            print(summary_line(s.request("snapshot")["snapshot"]))
        elif action == "show":
            from trainmeter.jupyter.extension import show

            return show()
        elif action == "stop":
            snap = s.request("end_run", status="ok").get("snapshot")
            print(summary_line(snap) if snap else "trainmeter: no run is open")
        else:
            print(f"%trainmeter: unknown action {action!r}; use status, show or stop")


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
    from IPython.core.error import UsageError

    try:
        peak = parse_flops(args.peak) if args.peak else None
        return {
            "budget_tokens": parse_count(args.budget_tokens, positive=True)
            if args.budget_tokens else None,
            "budget_flops": parse_flops_budget(args.budget_flops) if args.budget_flops else None,
            "convention": args.convention,
            "peak_flops": peak,
            "device": _device(args.device, peak),
            "dtype": _dtype(args.dtype) if args.dtype else None,
        }  # fmt: skip
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _device(name: str | None, peak_flops: float | None) -> str | None:
    """``--device`` as ``tm`` reads it (``peaks.check_gpu``): an unknown name without ``--peak``
    is a ValueError naming the close names (shown as a UsageError), not a run without a peak.

    IPython's argument splitter keeps quotes (``--device "H100 SXM"`` gives ``'"H100 SXM"'``):
    one pair around the whole name is dropped, as a shell would.
    """
    if name and len(name) > 1 and name[0] == name[-1] and name[0] in "\"'":
        name = name[1:-1]
    try:
        peaks.check_gpu(name, peak_flops)
    except peaks.UnknownGPUError as exc:
        raise ValueError(f"--device: {exc}") from None
    return name


def _dtype(text: str) -> str:
    """``--dtype`` as ``tm`` reads it (``peaks.normalize_dtype``); ValueError naming the forms."""
    dtype = peaks.normalize_dtype(text)
    if dtype is None:
        raise ValueError(f"unknown dtype {text!r}: use one of {', '.join(peaks.DTYPES)}")
    return dtype
