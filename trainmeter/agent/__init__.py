"""The agent: passive taps inside the training process (standard library + core.records only).

It never raises into the training loop, never synchronizes a device, never reads a value off
an accelerator tensor and never imports torch itself (SPEC invariants 1, 7, 8): it attaches
when the user's code imports torch. See docs/architecture.md "Agent".
"""
