"""The environment variables trainmeter sets and reads, by name: the one place for them.

``tm`` (the supervisor, ``supervisor/launcher.py``) sets the first three in its child's
environment and the agent (``agent/runtime.py``) reads them; the others are set by the person
(or the notebook extension) and read by the commands and the supervisor. The injected
``agent/boot/sitecustomize.py`` spells :data:`SOCKET` out itself, so that a process with no
socket imports nothing of trainmeter (``tests/unit/test_layers.py`` checks the spelling).

Standard library only; imports nothing.
"""

from __future__ import annotations

SOCKET = "TRAINMETER_SOCKET"
"""The supervisor's Unix socket, set by ``tm`` for its child: the agent connects to it."""
NO_TAP = "TRAINMETER_NO_TAP"
"""``"1"``: ``tm --no-tap``, no automatic taps (``emit()`` only)."""
PAD_TOKENS = "TRAINMETER_PAD_TOKENS"
"""``tm --pad-tokens``: ``"skip"`` counts only non-pad tokens (``agent/pad_tokens.py``)."""
GPU_BACKEND = "TRAINMETER_GPU_BACKEND"
"""The GPU backend (``nvml``, ``none``, ``fake:h100x2``, ...): the default of ``--gpu-backend``
(``tm``, ``tm doctor``, ``tm attach``) and the notebook supervisor's backend."""
SAMPLE_HZ = "TRAINMETER_SAMPLE_HZ"
"""Hardware samples per second in the notebook's supervisor (1 to 10)."""
JOB_ID = "TRAINMETER_JOB_ID"
"""A multi-node job's id, when the person sets it (docs/multinode.md)."""

__all__ = ["GPU_BACKEND", "JOB_ID", "NO_TAP", "PAD_TOKENS", "SAMPLE_HZ", "SOCKET"]
