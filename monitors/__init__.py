"""Resource monitors: host memory, server/client process trees and GPUs (NVML), sampled into a CSV.

``from monitors.sampler import start_monitor, read_monitor, peak_usage``; CLI: ``python -m monitors``.
"""
