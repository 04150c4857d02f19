"""The core library: everything the servers, the load generator, the runner and the reports share.

It imports nothing above it (not ``server``, ``monitors``, ``reports``, the
targets, the load generator or the runner); ``docs/architecture.md`` draws the
layers.
"""
