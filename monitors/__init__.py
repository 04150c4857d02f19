"""Resource monitors: host memory, server/client process trees, GPUs (NVML) and the server's own /metrics,
sampled into a CSV.

``from monitors.sampler import start_monitor, read_monitor, peak_usage``; CLI: ``python -m monitors``.
"""
