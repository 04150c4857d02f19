"""The suite's shared defaults, each written once: every layer that needs one imports it from here.

A default used by one program alone stays beside its option; one that two
programs (or a program and a library function) must agree on lives here.
"""

from __future__ import annotations

import os

# ------------------------------------------------------------------ model length

#: The context limit (prompt + output tokens) every server is started with and every prompt set is built for;
#: also the fallback when neither the flag nor the model's config says one.
MAX_MODEL_LEN = 2048

# ------------------------------------------------------------------ KV cache

#: GiB of KV cache vLLM preallocates on CPU (``VLLM_CPU_KVCACHE_SPACE``); on GPUs ``--gpu-memory-utilization`` rules.
KV_CACHE_GIB = 2.0

# ------------------------------------------------------------------ lag limit

#: Dispatch lag p99 (s) past which the load generator says, live and in the report, that it fell behind its schedule.
LAG_WARN_S = 0.005

# ------------------------------------------------------------------ threads

#: Torch threads of the basic server when the runner starts it: cores - 1, as vLLM on CPU keeps one core for its
#: API server (1 on a 2-core machine).
SERVER_THREADS = max(1, (os.cpu_count() or 2) - 1)

# ------------------------------------------------------------------ time-outs

#: Seconds one request may take in all before it fails as timed out (the client, the load generator, the benchmarks).
REQUEST_TIMEOUT_S = 600.0
#: Seconds a started basic server has to answer /health.
SERVER_START_TIMEOUT_S = 300.0
#: Seconds a started vLLM has to answer /health (about 80 s on 2 CPU cores; a first start compiles for longer).
VLLM_START_TIMEOUT_S = 900.0
