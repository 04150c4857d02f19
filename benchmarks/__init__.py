"""Benchmarks of the suite (scripts, not timed tests): ``python -m benchmarks.<name> --help``."""
