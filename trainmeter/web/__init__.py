"""The ``tm`` dashboard page: a loopback HTTP server inside the ``tm`` process.

Importing this package is cheap (constants only); :mod:`trainmeter.web.server` holds the
server, which ``tm`` imports only when it serves the page. See docs/architecture.md "Web page".
"""

DEFAULT_PORT = 8470  # tm's default; when taken, the next free port above it (PORT_TRIES in all)
PORT_TRIES = 20
