"""The agent: passive taps inside the training process (standard library + core.records only).

It never raises into the training loop, never synchronizes a device, never reads a value off
an accelerator tensor and never imports torch itself (the never-raise, same-numerics and
no-device-sync invariants, docs/architecture.md): it attaches when the user's code imports torch.
See docs/architecture.md "Agent".
"""
