"""The suite's locustfiles, one per task: Locust loads them by path (``llmload locustfile TASK`` prints it).

They ship inside the package so that an installed suite can run a load test
(``llmload locust TASK -- ARGS``); in a checkout, ``locustfiles/`` at the
repository root is a link to this folder, so ``locust -f locustfiles/chat.py``
works there too. The task registry (:mod:`llmload.tasks.registry`) points each
task at its file here.
"""
