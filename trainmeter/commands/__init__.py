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
