"""The experiment runner (``python -m llmload.runner``): starts each server, runs the matrix, makes the report.

Modules, top down: :mod:`.cli` (the command), :mod:`.options` (every option, its
default, the checks across options), :mod:`.matrix` (the loop over servers,
tasks, modes and levels), :mod:`.plan` (the cells of a run and their files),
:mod:`.cell` (one Locust run with the monitor beside it), :mod:`.capacity` (the
search for the highest rate under an SLO), :mod:`.progress` (the progress line
and the time left), :mod:`.interrupts` (SIGINT/SIGTERM), :mod:`.manifest`
(versions and machine for ``run.json``), :mod:`.tasks` (task names and
locustfiles). See docs/runner.md.

    python -m llmload.runner                    # the default matrix (about 28 min on 2 cores, 96 cells)
    python -m llmload.runner --quick            # a small matrix (a few minutes)
    python -m llmload.runner --servers basic=http://localhost:8000 --tasks qa --concurrency 1,4
"""
