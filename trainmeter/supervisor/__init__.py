"""The supervisor: outside the training process. It runs the child (``tm``) or serves a
notebook kernel, accepts agent records on a private Unix socket, is the one writer of the run
log, keeps the live engine and serves snapshots to subscribers. See docs/architecture.md.
"""
