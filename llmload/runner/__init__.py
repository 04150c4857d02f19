"""The experiment runner (``python -m llmload.runner``): starts each server, runs the matrix, makes the report.

See docs/runner.md.

    python -m llmload.runner                    # the default matrix
    python -m llmload.runner --quick            # a small matrix
    python -m llmload.runner --servers basic=http://localhost:8000 --tasks qa --concurrency 1,4
"""
