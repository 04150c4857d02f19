"""Stand-in for the ``pynvml`` module (nvidia-ml-py) in tests: the same functions, canned GPUs.

Configured from the JSON in ``FAKE_NVML_CONFIG`` at import (for a subprocess that
finds this folder first on ``PYTHONPATH``) or with :func:`configure`::

    {"gpus": [{"total": bytes,
               "used": bytes, or a list of bytes (one per call, the last repeats),
               "util": percent, or null (NotSupported),
               "compute": [[pid, bytes or null], ...], "graphics": [[pid, bytes or null], ...],
               "energy_mj": millijoules, or a list (one per call, the last repeats); absent: NotSupported}],
     "init_error": "message"   # optional: nvmlInit raises NVMLError
    }
"""

import json
import os
from types import SimpleNamespace


class NVMLError(Exception):
    pass


_config = json.loads(os.environ.get("FAKE_NVML_CONFIG", '{"gpus": []}'))
#: Names of the lifecycle calls made, in order (``nvmlInit``, ``nvmlShutdown``).
calls = []


def configure(config):
    global _config
    _config = config
    calls.clear()


def nvmlInit():
    if _config.get("init_error"):
        raise NVMLError(_config["init_error"])
    calls.append("nvmlInit")


def nvmlShutdown():
    calls.append("nvmlShutdown")


def nvmlDeviceGetCount():
    return len(_config["gpus"])


def nvmlDeviceGetHandleByIndex(index):
    if not 0 <= index < len(_config["gpus"]):
        raise NVMLError("Invalid Argument")
    return ("handle", index)


def _gpu(handle):
    return _config["gpus"][handle[1]]


def nvmlDeviceGetMemoryInfo(handle):
    gpu = _gpu(handle)
    used = gpu["used"]
    if isinstance(used, list):
        used = used.pop(0) if len(used) > 1 else used[0]
    return SimpleNamespace(total=gpu["total"], used=used, free=gpu["total"] - used)


def nvmlDeviceGetUtilizationRates(handle):
    util = _gpu(handle).get("util")
    if util is None:
        raise NVMLError("Not Supported")
    return SimpleNamespace(gpu=util, memory=0)


def nvmlDeviceGetTotalEnergyConsumption(handle):
    energy = _gpu(handle).get("energy_mj")
    if energy is None:
        raise NVMLError("Not Supported")
    if isinstance(energy, list):
        energy = energy.pop(0) if len(energy) > 1 else energy[0]
    return energy


def _processes(handle, kind):
    return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in _gpu(handle).get(kind, [])]


def nvmlDeviceGetComputeRunningProcesses(handle):
    return _processes(handle, "compute")


def nvmlDeviceGetGraphicsRunningProcesses(handle):
    return _processes(handle, "graphics")
