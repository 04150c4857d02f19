#!/usr/bin/env bash
# Run the tests in two parts: first every test that is neither timing-sensitive nor a unit test nor a `background`
# one on pytest-xdist workers; then the `serial` ones (wall-clock bounds of a few ms) in one process, with the
# `unit` tier and the `background` tests (commands run to completion) beside them on two more workers at idle CPU
# priority (they run on the CPU time the serial tests leave; their processes always come first). See
# docs/testing.md.
#
#   scripts/run_tests.sh [MARK_EXPRESSION] [PYTEST_ARGS...]     # e.g. scripts/run_tests.sh "unit or integration" -q
#   LLMLOAD_TEST_WORKERS=0 scripts/run_tests.sh                 # everything in one process, in collection order
#
# The exit status is the worst of the three runs' (a run that selects no test counts as passed).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${VENV:-.venv}/bin/python
SELECT=${1:-}
shift || true
WORKERS=${LLMLOAD_TEST_WORKERS:-3}  # 3 on 2 cores: the tests wait on servers part of the time (docs/testing.md)
# OpenMP threads (torch in the real-model servers and tests, vLLM) sleep at their barriers instead of spinning: the
# tests keep more processes busy than there are cores, where a spinning thread burns the CPU its peer waits for
# (docs/testing.md, "OpenMP threads sleep").
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
# Warm Locust (tests/warm/llmload_warm.py; LLMLOAD_WARM=0: off): a fork server that has imported Locust once; every
# `python -m locust` the tests start, directly or through the runner, is forked from it instead of importing anew.
if [ "${LLMLOAD_WARM:-1}" != 0 ]; then
  WARM_DIR=$(mktemp -d "${TMPDIR:-/tmp}/llmload-warm.XXXXXX")
  export PYTHONPATH="$PWD/tests/warm${PYTHONPATH:+:$PYTHONPATH}" LLMLOAD_WARM_LOCUST="$WARM_DIR/locust.sock"
  "$PY" -c 'import llmload_warm; llmload_warm.serve()' "$LLMLOAD_WARM_LOCUST" &
  WARM_PID=$!
  warm_done() {
    kill "$WARM_PID" 2>/dev/null
    wait "$WARM_PID" 2>/dev/null
    if [ -f "$LLMLOAD_WARM_LOCUST.log" ]; then
      echo "==> warm Locust: $(sort "$LLMLOAD_WARM_LOCUST.log" | uniq -c | sed 's/^ *//' | paste -sd, - | sed 's/,/, /g')" >&2
    fi
    rm -rf "$WARM_DIR"
  }
  trap warm_done EXIT
fi
if [ "$WORKERS" = 0 ]; then
  "$PY" -m pytest ${SELECT:+-m "$SELECT"} "$@"
  exit $?
fi
# Bytecode cached: where PYTHONDONTWRITEBYTECODE is set (this machine's environment), every server, Locust and
# runner process the tests start would compile the suite's modules again (about 0.15 s of CPU each), and each
# pytest process would rewrite every test module's asserts anew. The suite's modules are compiled once, first.
export PYTHONDONTWRITEBYTECODE=
"$PY" -m compileall -q -j 0 llmload server reports locustfiles monitors benchmarks tests datasets >/dev/null || true
both() { if [ -n "$SELECT" ]; then echo "($SELECT) and $1"; else echo "$1"; fi; }
status() { if [ "$1" = 5 ]; then echo 0; else echo "$1"; fi; }  # 5: no test selected
"$PY" -m pytest -m "$(both 'not serial and not unit and not background')" -n "$WORKERS" "$@"
parallel=$(status $?)
# The unit tier and the background tests, beside the serial part: SCHED_IDLE (nice 19 where chrt is missing), on
# two workers (the serial part leaves about 1.5 of the 2 cores), their output shown after.
LANE_LOG=$(mktemp "${TMPDIR:-/tmp}/llmload-lane.XXXXXX")
source scripts/idle_priority.sh
LANE_WORKERS=$(( WORKERS < 2 ? WORKERS : 2 ))
"${IDLE[@]}" "$PY" -m pytest -m "$(both '(unit or background) and not serial')" -n "$LANE_WORKERS" "$@" \
  >"$LANE_LOG" 2>&1 &
LANE_PID=$!
echo "==> the timing-sensitive tests, alone (the unit tier and the background tests beside them at idle priority," \
     "pid $LANE_PID)" >&2
# Only the files that mark tests serial are collected (collecting every test module takes about 5 s more), unless
# the arguments name something themselves (a path, or an option's value).
FILES=()
if [ -z "$(printf '%s\n' "$@" | grep -v '^-')" ]; then
  mapfile -t FILES < <(grep -rlE --include='test_*.py' 'mark\.serial' tests)
fi
"$PY" -m pytest -m "$(both serial)" -p no:xdist "$@" "${FILES[@]}"
serial=$(status $?)
wait "$LANE_PID"
lane=$(status $?)
echo "==> the unit tier and the background tests (run beside the timing-sensitive tests)" >&2
cat "$LANE_LOG"
rm -f "$LANE_LOG"
worst=$(( parallel > serial ? parallel : serial ))
exit $(( worst > lane ? worst : lane ))
