#!/usr/bin/env bash
# Check that no unit or background test outside `serial` has a wall-clock bound: run them at idle CPU priority, as
# `make test` does beside the serial part, while two bursty busy loops (0.1-1.5 s on, 0.05-0.5 s off) take both
# cores. A test that fails here but passes alone belongs in `serial` (docs/testing.md).
#
#   scripts/starve_unit_tier.sh [PYTEST_ARGS...]
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${VENV:-.venv}/bin/python
HOG='import random, time
while True:
    end = time.monotonic() + random.uniform(0.1, 1.5)
    while time.monotonic() < end:
        pass
    time.sleep(random.uniform(0.05, 0.5))'
HOGS=()
for _ in 1 2; do "$PY" -c "$HOG" & HOGS+=($!); done
trap 'kill "${HOGS[@]}" 2>/dev/null' EXIT
source scripts/idle_priority.sh
"${IDLE[@]}" "$PY" -m pytest -m "(unit or background) and not serial" -p no:xdist -p no:cacheprovider "$@"
