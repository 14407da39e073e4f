"""``tm``'s commands, one module each with ``main(argv) -> int``: ``run`` is ``tm``'s own run
mode (``tm train.py``, ``tm -- CMD``), :data:`SUBCOMMANDS` the rest; ``args`` holds what they
share. ``trainmeter/cli.py`` only dispatches to them."""

# name -> the module whose main(argv) runs `tm NAME ...`, in the order `tm --help` lists them
SUBCOMMANDS = {
    "replay": "trainmeter.commands.replay",
    "ls": "trainmeter.commands.ls",
    "peaks": "trainmeter.commands.peaks",
    "doctor": "trainmeter.commands.doctor",
    "plan": "trainmeter.commands.plan",
    "view": "trainmeter.commands.view",
    "passport": "trainmeter.commands.passport",
    "export": "trainmeter.commands.export",
    "merge": "trainmeter.commands.merge",
    "attach": "trainmeter.commands.attach",
}

# name -> what it does, one line each, as `tm --help` lists them after the run mode's flags
SUMMARIES = {
    "replay": "a run's snapshot rebuilt from its log (--json for all of it)",
    "ls": "the runs under ./.trainmeter, oldest first, one line each",
    "peaks": "the dense peak a GPU name resolves to, and its source",
    "doctor": "what trainmeter can see here: NVML, GPUs, GPM, peaks, trackers",
    "plan": "before renting: a model's FLOPs, time, GPU-hours, energy and cost",
    "view": "a finished run's replay notebook in JupyterLab (--web: its page)",
    "passport": "a run's passport: model, tokens, FLOPs per convention, MFU, energy",
    "export": "a run's series to W&B (offline), MLflow or CSV",
    "merge": "one multi-node job's node runs merged into one run",
    "attach": "watch a program already running: its process facts and GPUs",
}


def help_epilog() -> str:
    """The subcommands, one line each, for ``tm --help``."""
    width = max(map(len, SUBCOMMANDS))
    rows = [f"  tm {name.ljust(width)}  {SUMMARIES[name]}" for name in SUBCOMMANDS]
    return "subcommands (tm NAME --help for each):\n" + "\n".join(rows)
