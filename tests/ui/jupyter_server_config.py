"""Jupyter server config for the UI tests: galata's test settings, on loopback.

Started by tests/ui/start_jupyter.sh (Playwright's webServer), which sets TM_UI_ROOT_DIR to a
temporary folder holding copies of tests/ui/notebooks/, TM_UI_SCRATCH to a folder it removes at the
end, and TM_UI_JUPYTER_PORT to a free port.
Never use this config for anything else: galata's settings turn off every protection (no token,
no XSRF check).
"""

import os
import tempfile

from jupyterlab.galata import configure_jupyter_server

c = get_config()  # noqa: F821 (provided by the Jupyter config loader)
# galata makes temporary folders (workspaces, a root we replace, a bash rcfile) and never removes
# them: make them inside the scratch folder that start_jupyter.sh removes.
tempfile.tempdir = os.environ["TM_UI_SCRATCH"]
try:
    configure_jupyter_server(c)
finally:
    tempfile.tempdir = None

c.ServerApp.ip = "127.0.0.1"
c.ServerApp.port = int(os.environ["TM_UI_JUPYTER_PORT"])
c.ServerApp.root_dir = os.environ["TM_UI_ROOT_DIR"]
c.ServerApp.allow_root = True  # CI runs as root
c.ServerApp.open_browser = False
