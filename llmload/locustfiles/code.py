"""Locust load for the code task: write code from a description.

    locust -f locustfiles/code.py --headless -u 8 -r 8 -t 60s -H http://localhost:8000 --mode stream

Prompts: datasets/data/code.jsonl (or --dataset PATH). The suite's options: python -m llmload.loadgen
"""

from llmload.loadgen.user import LLMUser


class CodeUser(LLMUser):
    task_name = "code"
