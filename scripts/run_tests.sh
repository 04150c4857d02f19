#!/usr/bin/env bash
# Run the tests in two parts: first every test that is not timing-sensitive on pytest-xdist workers, then the
# `serial` ones (wall-clock bounds of a few ms) alone in one process. See docs/testing.md.
#
#   scripts/run_tests.sh [MARK_EXPRESSION] [PYTEST_ARGS...]     # e.g. scripts/run_tests.sh "unit or integration" -q
#   LLMLOAD_TEST_WORKERS=0 scripts/run_tests.sh                 # everything in one process, in collection order
#
# The exit status is the worse of the two parts' (a part that selects no test counts as passed).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${VENV:-.venv}/bin/python
SELECT=${1:-}
shift || true
WORKERS=${LLMLOAD_TEST_WORKERS:-3}  # 3 on 2 cores: the tests wait on servers part of the time (docs/testing.md)
if [ "$WORKERS" = 0 ]; then
  exec "$PY" -m pytest ${SELECT:+-m "$SELECT"} "$@"
fi
# Bytecode cached: where PYTHONDONTWRITEBYTECODE is set (this machine's environment), every server, Locust and
# runner process the tests start would compile the suite's modules again (about 0.15 s of CPU each), and each
# pytest process would rewrite every test module's asserts anew. The suite's modules are compiled once, first.
export PYTHONDONTWRITEBYTECODE=
"$PY" -m compileall -q -j 0 llmload server reports locustfiles monitors benchmarks tests datasets >/dev/null || true
both() { if [ -n "$SELECT" ]; then echo "($SELECT) and $1"; else echo "$1"; fi; }
status() { if [ "$1" = 5 ]; then echo 0; else echo "$1"; fi; }  # 5: no test selected
"$PY" -m pytest -m "$(both 'not serial')" -n "$WORKERS" "$@"
parallel=$(status $?)
echo "==> the timing-sensitive tests, alone" >&2
# Only the files that mark tests serial are collected (collecting every test module takes about 5 s more), unless
# the arguments name something themselves (a path, or an option's value).
FILES=()
if [ -z "$(printf '%s\n' "$@" | grep -v '^-')" ]; then
  mapfile -t FILES < <(grep -rlE --include='test_*.py' 'mark\.serial' tests)
fi
"$PY" -m pytest -m "$(both serial)" -p no:xdist "$@" "${FILES[@]}"
serial=$(status $?)
exit $(( parallel > serial ? parallel : serial ))
