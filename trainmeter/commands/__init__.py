"""``tm`` subcommands of more than a few lines: one module each, with ``main(argv) -> int``."""
