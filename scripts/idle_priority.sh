# Sourced by scripts/run_tests.sh and scripts/starve_unit_tier.sh: IDLE, the command prefix that runs a process
# at idle CPU priority (SCHED_IDLE through chrt; nice -n 19 where chrt is missing or refused).
IDLE=(nice -n 19)
if command -v chrt >/dev/null 2>&1 && chrt --idle 0 true 2>/dev/null; then IDLE=(chrt --idle 0); fi
